package embedded

import (
	"strings"
	"testing"
)

// TestStoreSync: the store's SQLite runs with the synchronous setting asked for, full unless
// told otherwise, and a setting it does not know refuses to start the store.
func TestStoreSync(t *testing.T) {
	for sync, want := range map[string]string{"": "synchronous(full)", SyncFull: "synchronous(full)", SyncNormal: "synchronous(normal)"} {
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
