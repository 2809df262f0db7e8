package testenv

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Binary is versitygw, a real S3 server that keeps objects as files under a directory; the
// module pins its version as a tool (go.mod), and scripts/test builds it like nats-server.
var S3Binary = &Binary{Env: "CHAT_TEST_S3_BIN", Package: "github.com/versity/versitygw/cmd/versitygw", Name: "versitygw"}

// s3StartTimeout bounds versitygw's start, well under a second when the machine is idle.
const s3StartTimeout = time.Minute

// S3Server is a real S3-compatible server running as a child process, with the root user's
// credentials.
type S3Server struct {
	*Process
	// Endpoint is its host:port, plain HTTP.
	Endpoint string
	// Region is the region it answers for.
	Region string
	// AccessKey and SecretKey are the root user's.
	AccessKey, SecretKey string
}

// StartS3 starts an S3 server on a port StartOnPorts picks (versitygw cannot report a port the
// kernel chose), storing under a temporary directory, until the test ends.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	s := &S3Server{Region: "us-east-1", AccessKey: "chatd-test", SecretKey: "chatd-test-secret"}
	bin := S3Binary.Path(t)
	probe := &http.Client{Timeout: 5 * time.Second}
	StartOnPorts(t, 1, func(ports []int) error {
		s.Endpoint = fmt.Sprintf("127.0.0.1:%d", ports[0])
		s.Process = StartProcess(t, t.TempDir(), "versitygw", nil, bin,
			"--port", s.Endpoint, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
			"posix", t.TempDir())
		return WaitStarted([]*Process{s.Process}, s3StartTimeout, func() error {
			// Holds first: until versitygw has bound the port, whatever took it would answer.
			if err := s.Holds(ports[0]); err != nil {
				return err
			}
			resp, err := probe.Get("http://" + s.Endpoint + "/") // any answer, even 403, means it serves
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
	})
	return s
}

// NewBucket creates a bucket with a fresh name and returns the name.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	client, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region})
	if err != nil {
		t.Fatalf("s3 client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "test-" + strings.ToLower(uuid.NewString()[:8])
	if err := client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}
