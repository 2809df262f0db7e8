package main_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/blob"
	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/testenv"
)

// TestAttachmentsWhereConfigured: chatd keeps files under its data directory by default, and in
// the S3 bucket the environment names (CHAT_S3_*) when it names one; either way a member
// downloads what was uploaded.
func TestAttachmentsWhereConfigured(t *testing.T) {
	s3 := testenv.StartS3(t)
	bucket := s3.NewBucket(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"data directory", nil},
		{"s3", []string{"CHAT_S3_ENDPOINT=" + s3.Endpoint, "CHAT_S3_BUCKET=" + bucket, "CHAT_S3_REGION=" + s3.Region,
			"CHAT_S3_TLS=false", "CHAT_S3_ACCESS_KEY=" + s3.AccessKey, "CHAT_S3_SECRET_KEY=" + s3.SecretKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dataDir := t.TempDir()
			server := testenv.StartChatd(t, dataDir, tc.env)
			base := "http://" + server.Addr
			token, _, err := client.Login(ctx, nil, base, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := client.Login(ctx, nil, base, "bob"); err != nil {
				t.Fatal(err)
			}
			alice, err := client.Dial(ctx, "ws://"+server.Addr+"/ws", token, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer alice.Close()
			dm, err := alice.OpenDM(ctx, "bob")
			if err != nil {
				t.Fatal(err)
			}
			data := []byte("kept where the operator said")
			up, err := client.UploadFile(ctx, nil, base, token, dm.ID, "where.txt", bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Download(ctx, nil, base, token, up.ID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("downloaded %q, %v", got, err)
			}
			underDataDir := objectsUnder(t, filepath.Join(dataDir, "files"))
			inBucket := bucketObjects(t, ctx, s3, bucket)
			want := map[bool]string{true: "in the bucket", false: "under the data directory"}[tc.env != nil]
			if (tc.env != nil) != (inBucket > 0) || (tc.env == nil) != (underDataDir > 0) {
				t.Fatalf("%d objects under the data directory, %d in the bucket; want the file %s", underDataDir, inBucket, want)
			}
			stopChatd(t, server)
		})
	}
}

// objectsUnder counts the regular files under dir (a blob.Dir's objects), none if it is missing.
func objectsUnder(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return filepath.SkipAll
		}
		if err == nil && !e.IsDir() && !strings.Contains(p, "/.tmp/") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// bucketObjects counts the objects of a bucket of the S3 server.
func bucketObjects(t *testing.T, ctx context.Context, s3 *testenv.S3Server, bucket string) int {
	t.Helper()
	store, err := blob.OpenS3(ctx, blob.S3Config{Endpoint: s3.Endpoint, Bucket: bucket, Region: s3.Region, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	n := 0
	for _, err := range store.ListOlder(ctx, "", time.Now().Add(time.Hour)) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
