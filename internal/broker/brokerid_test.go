package broker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBrokerIDUnreadableIsNotReplaced: a broker.id that exists but cannot
// be read is an error, not a reason to write a new id over it (the id keys
// the WAL's checkpoint). A symlink loop stands for the unreadable file,
// since root reads through any permission bits.
func TestBrokerIDUnreadableIsNotReplaced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "broker.id")
	if err := os.Symlink("broker.id", p); err != nil {
		t.Fatal(err)
	}
	if id, err := BrokerID(dir); err == nil {
		t.Errorf("an unreadable broker.id gave id %s", id)
	}
	if target, err := os.Readlink(p); err != nil || target != "broker.id" {
		t.Errorf("broker.id was replaced: %q %v", target, err)
	}
	// A missing one is created, and read back the same.
	dir = t.TempDir()
	id, err := BrokerID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := BrokerID(dir); err != nil || again != id {
		t.Errorf("read back %s %v, want %s", again, err, id)
	}
}
