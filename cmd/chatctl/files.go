package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

// fileTimeout bounds one file's upload or download: 25 MiB over a slow link.
const fileTimeout = 10 * time.Minute

// fileFlags collects the repeatable -file flag of send.
type fileFlags []string

func (f *fileFlags) String() string     { return strings.Join(*f, ",") }
func (f *fileFlags) Set(v string) error { *f = append(*f, v); return nil }

// uploadFiles uploads each path into a conversation, streamed from disk with its size, and
// returns the pending uploads' ids in order, for a send to attach.
func (c *cli) uploadFiles(ctx context.Context, convID string, paths []string) ([]string, error) {
	token, err := c.bearer()
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(paths))
	for _, p := range paths {
		up, err := c.uploadFile(ctx, token, convID, p)
		if err != nil {
			return nil, err
		}
		ids = append(ids, up.ID)
	}
	return ids, nil
}

// uploadFile uploads one file, named by its base name.
func (c *cli) uploadFile(ctx context.Context, token, convID, path string) (client.Upload, error) {
	f, err := os.Open(path)
	if err != nil {
		return client.Upload{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close() // read only
	st, err := f.Stat()
	if err != nil {
		return client.Upload{}, fmt.Errorf("stat %s: %w", path, err)
	}
	// A whole file may take longer than one request: its own deadline, not c.timeout.
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	return client.UploadFile(ctx, nil, c.server, token, convID, filepath.Base(path), f, st.Size())
}

// runDownload writes a file of a message to a path, or to stdout with "-" or no path.
func runDownload(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("download")
	pos, err := c.parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	if !protocol.ValidID(pos[0]) {
		return usagef("%q is not a file id", pos[0])
	}
	token, err := c.bearer()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	resp, err := client.Download(ctx, nil, c.server, token, pos[0])
	if err != nil {
		return err
	}
	defer resp.Body.Close() // read only
	out, closeOut := c.stdout, func() error { return nil }
	if len(pos) == 2 && pos[1] != "-" {
		f, err := os.Create(pos[1])
		if err != nil {
			return fmt.Errorf("create %s: %w", pos[1], err)
		}
		out, closeOut = f, f.Close
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = closeOut() // the copy's error says what went wrong
		return fmt.Errorf("download %s: %w", pos[0], err)
	}
	return closeOut()
}

// printAttachments prints a message's files under it, one line each: "  [file] id name (type,
// size bytes)", with an image's size in pixels.
func (c *cli) printAttachments(files []protocol.Attachment) {
	for _, a := range files {
		dims := ""
		if a.Width > 0 {
			dims = fmt.Sprintf(", %d×%d", a.Width, a.Height)
		}
		fmt.Fprintf(c.stdout, "  [file] %s %s (%s, %d bytes%s)\n", a.ID, a.Name, a.Type, a.Size, dims)
	}
}
