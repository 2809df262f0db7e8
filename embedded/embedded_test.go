package embedded

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreSync: the store's SQLite runs with the synchronous setting asked for (with interval,
// the default, normal, and the log synced by the store itself), and a setting it does not know
// refuses to start the store.
func TestStoreSync(t *testing.T) {
	for sync, want := range map[string]string{"": "synchronous(normal)", SyncInterval: "synchronous(normal)",
		SyncFull: "synchronous(full)", SyncNormal: "synchronous(normal)"} {
		url, err := sqliteURL("/data/store", sync)
		if err != nil || !strings.HasPrefix(url, "file:/data/store/?") || !strings.Contains(url, "_pragma="+want) {
			t.Errorf("sync %q: SQLite URL %q, %v; want the directory with _pragma=%s", sync, url, err, want)
		}
	}
	dir := t.TempDir()
	if _, err := StartMongo(MongoConfig{Dir: dir, Sync: "off"}); err == nil || !strings.Contains(err.Error(), `"off"`) {
		t.Fatalf("a store with sync off started, or its error does not name the setting: %v", err)
	}
}

// TestLogSyncsFindTheStoresLogs: the log sync of SyncInterval syncs each database's write-ahead
// log, and a log SQLite has removed is no error.
func TestLogSyncsFindTheStoresLogs(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "chat.sqlite")+"?_pragma=journal_mode(wal)&_pragma=synchronous(normal)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (x); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.sqlite-wal"))
	if len(logs) != 1 {
		t.Fatalf("logs %v; want the database's one", logs)
	}
	if err := syncLogsOnce(t.Context(), dir); err != nil {
		t.Fatalf("sync with the log there: %v", err)
	}
	if err := db.Close(); err != nil { // SQLite removes the log
		t.Fatal(err)
	}
	if err := syncLogsOnce(t.Context(), dir); err != nil {
		t.Fatalf("sync with the log gone: %v", err)
	}
	if err := syncLogsOnce(t.Context(), filepath.Join(dir, "[")); err == nil {
		t.Fatal("a directory that is no pattern was listed")
	}
}
