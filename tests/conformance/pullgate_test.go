// Package conformance runs containerd's own snapshotter conformance suite
// (snapshots/testsuite, from Debian's golang-github-containerd-containerd-dev) against a
// running `pullgate serve`, twice:
//
//   - TestProxy: through containerd's proxy client directly; each subtest gets its own daemon
//     (the suite reuses key names across parallel subtests, and keys are global to a daemon).
//   - TestMetadata: through containerd's metadata layer (metadata.NewDB with the proxy as its
//     backend), so keys and labels are exactly what containerd sends (`<ns>/<seq>/<key>`).
//     One long-running daemon and one metadata DB serve every subtest, each in its own
//     namespace; afterwards containerd's garbage collector runs and the backend must hold
//     exactly the snapshots the metadata still references.
//
// Build: GOPATH=/usr/share/gocode GO111MODULE=off GOPROXY=off go test -c
// Run:   ./conformance.test -test.root -pullgate /path/to/pullgate [-driver overlay|copy]
package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/metadata"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/proxy"
	"github.com/containerd/containerd/snapshots/testsuite"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
)

var (
	pullgateBin = flag.String("pullgate", "", "path to the pullgate binary")
	driver      = flag.String("driver", "overlay", "pullgate storage driver: overlay or copy")
)

type daemon struct {
	cmd  *exec.Cmd
	sock string
	root string
	log  string
	conn *grpc.ClientConn
}

// startDaemon runs `pullgate serve` with a config rooted in dir and connects to it.
func startDaemon(t *testing.T, dir string) *daemon {
	t.Helper()
	if *pullgateBin == "" {
		t.Fatal("-pullgate is required")
	}
	d := &daemon{sock: filepath.Join(dir, "snap.sock"), root: filepath.Join(dir, "pg"), log: filepath.Join(dir, "pullgate.log")}
	cfg := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf("[daemon]\nroot = %q\nsnapshotter_socket = %q\napi_socket = %q\nlog_level = \"debug\"\ndriver = %q\n",
		d.root, d.sock, filepath.Join(dir, "api.sock"), *driver)
	if err := os.WriteFile(cfg, []byte(body), 0600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(*pullgateBin, "serve", "--config", cfg)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(d.sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			b, _ := os.ReadFile(d.log)
			t.Fatalf("pullgate did not create %s: %s", d.sock, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.conn = dial(t, d.sock)
	return d
}

func (d *daemon) snapshotter() snapshots.Snapshotter {
	return proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(d.conn), "pullgate")
}

func (d *daemon) stop() error {
	d.conn.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	err := d.cmd.Wait()
	if err != nil {
		b, _ := os.ReadFile(d.log)
		return fmt.Errorf("pullgate exited with %v: %s", err, b)
	}
	return nil
}

func TestProxy(t *testing.T) {
	testsuite.SnapshotterSuite(t, "Pullgate", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		d := startDaemon(t, root)
		return d.snapshotter(), d.stop, nil
	})
}

// nsSnapshotter puts every call in its own namespace, so parallel subtests sharing one
// metadata DB never see each other's keys.
type nsSnapshotter struct {
	snapshots.Snapshotter
	ns string
}

func (s nsSnapshotter) c(ctx context.Context) context.Context { return namespaces.WithNamespace(ctx, s.ns) }
func (s nsSnapshotter) Stat(ctx context.Context, key string) (snapshots.Info, error) {
	return s.Snapshotter.Stat(s.c(ctx), key)
}
func (s nsSnapshotter) Update(ctx context.Context, info snapshots.Info, fp ...string) (snapshots.Info, error) {
	return s.Snapshotter.Update(s.c(ctx), info, fp...)
}
func (s nsSnapshotter) Usage(ctx context.Context, key string) (snapshots.Usage, error) {
	return s.Snapshotter.Usage(s.c(ctx), key)
}
func (s nsSnapshotter) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	return s.Snapshotter.Mounts(s.c(ctx), key)
}
func (s nsSnapshotter) Prepare(ctx context.Context, key, parent string, o ...snapshots.Opt) ([]mount.Mount, error) {
	return s.Snapshotter.Prepare(s.c(ctx), key, parent, o...)
}
func (s nsSnapshotter) View(ctx context.Context, key, parent string, o ...snapshots.Opt) ([]mount.Mount, error) {
	return s.Snapshotter.View(s.c(ctx), key, parent, o...)
}
func (s nsSnapshotter) Commit(ctx context.Context, name, key string, o ...snapshots.Opt) error {
	return s.Snapshotter.Commit(s.c(ctx), name, key, o...)
}
func (s nsSnapshotter) Remove(ctx context.Context, key string) error {
	return s.Snapshotter.Remove(s.c(ctx), key)
}
func (s nsSnapshotter) Walk(ctx context.Context, fn snapshots.WalkFunc, filters ...string) error {
	return s.Snapshotter.Walk(s.c(ctx), fn, filters...)
}
func (s nsSnapshotter) Close() error { return nil }

func backendKeys(t *testing.T, sn snapshots.Snapshotter) []string {
	var keys []string
	if err := sn.Walk(context.Background(), func(_ context.Context, i snapshots.Info) error {
		keys = append(keys, i.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// metadataSuite runs containerd's suite through containerd's metadata layer (metadata.NewDB
// over a bolt database in dir, with backend as its "pullgate" snapshotter), each subtest in a
// namespace of its own, `<prefix><n>`. Returns the database and how many namespaces it used.
func metadataSuite(t *testing.T, backend snapshots.Snapshotter, dir, name, prefix string) (*metadata.DB, int32) {
	bdb, err := bolt.Open(filepath.Join(dir, "meta.db"), 0600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bdb.Close() })
	db := metadata.NewDB(bdb, nil, map[string]snapshots.Snapshotter{"pullgate": backend})
	if err := db.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int32
	t.Run("suite", func(t *testing.T) {
		testsuite.SnapshotterSuite(t, name, func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
			ns := fmt.Sprintf("%s%d", prefix, atomic.AddInt32(&n, 1))
			return nsSnapshotter{db.Snapshotter("pullgate"), ns}, nil, nil
		})
	})
	return db, atomic.LoadInt32(&n)
}

func TestMetadata(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	backend := d.snapshotter()
	db, n := metadataSuite(t, backend, dir, "PullgateMetadata", "suite-")

	// Every backend key must be `<namespace>/<seq>/<key>` as containerd sends it.
	before := backendKeys(t, backend)
	if len(before) == 0 {
		t.Fatal("the backend holds no snapshots after the suite")
	}
	for _, k := range before {
		if parts := strings.SplitN(k, "/", 3); len(parts) != 3 || !strings.HasPrefix(parts[0], "suite-") {
			t.Errorf("backend key %q is not <namespace>/<seq>/<key>", k)
		}
	}

	// containerd's GC: walks the backend and removes what no namespace references. Remove
	// everything first, so the backend must end up empty.
	ctx := context.Background()
	for i := int32(1); i <= n; i++ {
		nctx := namespaces.WithNamespace(ctx, fmt.Sprintf("suite-%d", i))
		sn := db.Snapshotter("pullgate")
		var names []string
		sn.Walk(nctx, func(_ context.Context, info snapshots.Info) error {
			names = append(names, info.Name)
			return nil
		})
		// Drop gc roots so the collector may take everything.
		for _, name := range names {
			info, err := sn.Stat(nctx, name)
			if err != nil {
				t.Fatal(err)
			}
			delete(info.Labels, "containerd.io/gc.root")
			if _, err := sn.Update(nctx, info, "labels"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.GarbageCollect(ctx); err != nil {
		t.Fatalf("containerd GC through pullgate failed: %v", err)
	}
	if after := backendKeys(t, backend); len(after) != 0 {
		t.Errorf("after GC the backend still holds %d snapshots: %v", len(after), after)
	}
	snapDirs, _ := os.ReadDir(filepath.Join(d.root, "snapshots"))
	if len(snapDirs) != 0 {
		t.Errorf("after GC %d snapshot directories remain on disk", len(snapDirs))
	}
	t.Logf("backend held %d snapshots before GC, none after", len(before))
	if err := d.stop(); err != nil {
		t.Error(err)
	}
}
