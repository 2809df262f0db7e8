package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// rssKiB reads a process's resident set size (VmRSS) from /proc, in KiB.
func rssKiB(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of process %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %q of process %d: %w", line, pid, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("process %d has no VmRSS line", pid)
}

// totalRSS sums the RSS of the given processes (the nodes under test); none gives 0.
func totalRSS(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		kib, err := rssKiB(pid)
		if err != nil {
			return 0, err
		}
		total += kib
	}
	return total, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// serverCPU sums the user and system CPU seconds the processes have used; unreadable ones count 0.
func serverCPU(pids []int) float64 {
	var total float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may hold spaces: utime and
		// stime are the 12th and 13th of them (fields 14 and 15 of proc(5)).
		end := strings.LastIndexByte(string(data), ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(string(data[end+1:]))
		if len(fields) < 13 {
			continue
		}
		utime, err1 := strconv.ParseInt(fields[11], 10, 64)
		stime, err2 := strconv.ParseInt(fields[12], 10, 64)
		if err1 == nil && err2 == nil {
			total += float64(utime+stime) / clockTicks
		}
	}
	return total
}
