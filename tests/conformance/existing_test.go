package conformance

// Tests against a pullgate that is already running under a real containerd: the crash test
// (tests/crash.sh) runs them on the daemon it restarted after its crashes, on the same root.
//
//   - TestExisting: containerd's conformance suite, through containerd's metadata layer with a
//     scratch database, so every key carries a namespace of its own (`after-crash-N/<seq>/...`)
//     and never meets containerd's; afterwards the suite's snapshots are removed again.
//   - TestConsistency: pullgate's snapshots agree with containerd's view: every snapshot
//     containerd lists in any namespace exists in pullgate with the same kind and parent, and
//     every directory an active or view snapshot mounts exists on disk.
//
// Run: ./conformance.test -test.run 'TestExisting|TestConsistency' -existing SNAPSHOTTER_SOCK
//      -containerd CONTAINERD_SOCK

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	namespacesapi "github.com/containerd/containerd/api/services/namespaces/v1"
	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/pkg/dialer"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/proxy"
	"google.golang.org/grpc"
)

var (
	existing      = flag.String("existing", "", "snapshotter socket of a running pullgate")
	containerdSck = flag.String("containerd", "", "socket of the containerd that uses it")
)

const afterCrash = "after-crash-"

// dial connects exactly as containerd dials a proxy plugin (services/server/server.go).
func dial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.Dial(dialer.DialAddress(sock), grpc.WithInsecure(), grpc.WithContextDialer(dialer.ContextDialer))
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	return conn
}

func runningBackend(t *testing.T) snapshots.Snapshotter {
	t.Helper()
	if *existing == "" {
		t.Fatal("-existing (the running pullgate's snapshotter socket) is required")
	}
	conn := dial(t, *existing)
	t.Cleanup(func() { conn.Close() })
	return proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "pullgate")
}

func TestExisting(t *testing.T) {
	backend := runningBackend(t)
	metadataSuite(t, backend, t.TempDir(), "AfterCrash", afterCrash)
	// Remove what the suite left, children before parents, so the daemon holds only
	// containerd's snapshots again. (containerd's GC on this scratch database would also
	// remove containerd's own snapshots, which it does not know.)
	ctx := context.Background()
	for round := 0; ; round++ {
		var left []string
		backend.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
			if strings.HasPrefix(i.Name, afterCrash) {
				left = append(left, i.Name)
			}
			return nil
		})
		if len(left) == 0 {
			break
		}
		if round > 200 {
			t.Fatalf("cannot remove the suite's snapshots: %v", left)
		}
		for _, k := range left {
			backend.Remove(ctx, k) // fails for parents until their children are gone
		}
	}
}

// backendPaths lists the host paths a mount uses.
func backendPaths(src string, options []string) []string {
	paths := []string{}
	if strings.HasPrefix(src, "/") {
		paths = append(paths, src)
	}
	for _, o := range options {
		for _, p := range []string{"lowerdir=", "upperdir=", "workdir="} {
			if strings.HasPrefix(o, p) {
				paths = append(paths, strings.Split(strings.TrimPrefix(o, p), ":")...)
			}
		}
	}
	return paths
}

func TestConsistency(t *testing.T) {
	backend := runningBackend(t)
	if *containerdSck == "" {
		t.Fatal("-containerd is required")
	}
	cconn := dial(t, *containerdSck)
	defer cconn.Close()
	ctx := context.Background()

	// pullgate's view: backend keys are `<ns>/<seq>/<name>`. An active or view snapshot is
	// found by namespace and name; a committed one by name in any namespace, because a
	// namespace that adopts a chain (containerd.io/snapshot.ref) records the backend key of the
	// namespace that unpacked it.
	type entry struct {
		key  string
		info snapshots.Info
	}
	byName := map[string][]entry{} // "<ns> <name>" -> backend entries
	committed := map[string][]entry{} // "<name>" -> committed backend entries
	tail := func(key string) string {
		if parts := strings.SplitN(key, "/", 3); len(parts) == 3 {
			return parts[2]
		}
		return key
	}
	total := 0
	if err := backend.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		total++
		parts := strings.SplitN(i.Name, "/", 3)
		if len(parts) != 3 {
			return nil // not made through containerd's metadata (the probe of tests/lib.sh)
		}
		e := entry{i.Name, i}
		byName[parts[0]+" "+parts[2]] = append(byName[parts[0]+" "+parts[2]], e)
		if i.Kind == snapshots.KindCommitted {
			committed[parts[2]] = append(committed[parts[2]], e)
		}
		return nil
	}); err != nil {
		t.Fatalf("walk pullgate: %v", err)
	}

	// containerd's view, namespace by namespace.
	nsResp, err := namespacesapi.NewNamespacesClient(cconn).List(ctx, &namespacesapi.ListNamespacesRequest{})
	if err != nil {
		t.Fatalf("list containerd namespaces: %v", err)
	}
	csn := proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(cconn), "pullgate")
	seen := 0
	for _, ns := range nsResp.Namespaces {
		nctx := namespaces.WithNamespace(ctx, ns.Name)
		err := csn.Walk(nctx, func(_ context.Context, ci snapshots.Info) error {
			seen++
			es := byName[ns.Name+" "+ci.Name]
			if ci.Kind == snapshots.KindCommitted && len(es) == 0 {
				es = committed[ci.Name]
			}
			if len(es) == 0 || (ci.Kind != snapshots.KindCommitted && len(es) != 1) {
				t.Errorf("namespace %s: containerd's %v snapshot %q has %d counterparts in pullgate", ns.Name, ci.Kind, ci.Name, len(es))
				return nil
			}
			bi := es[0].info
			if bi.Kind != ci.Kind {
				t.Errorf("namespace %s: snapshot %q is %v in containerd but %v in pullgate", ns.Name, ci.Name, ci.Kind, bi.Kind)
			}
			if tail(bi.Parent) != ci.Parent {
				t.Errorf("namespace %s: snapshot %q: parent %q in containerd, %q in pullgate", ns.Name, ci.Name, ci.Parent, bi.Parent)
			}
			if bi.Kind == snapshots.KindActive || bi.Kind == snapshots.KindView {
				mounts, err := backend.Mounts(ctx, es[0].key)
				if err != nil {
					t.Errorf("namespace %s: mounts of %q: %v", ns.Name, ci.Name, err)
					return nil
				}
				for _, m := range mounts {
					for _, p := range backendPaths(m.Source, m.Options) {
						if _, err := os.Stat(p); err != nil {
							t.Errorf("namespace %s: snapshot %q mounts %s, which is missing: %v", ns.Name, ci.Name, p, err)
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("walk namespace %s through containerd: %v", ns.Name, err)
		}
	}
	if seen == 0 {
		t.Fatal("containerd lists no pullgate snapshot at all: nothing was compared")
	}
	t.Logf("%d snapshots in containerd's view across %d namespaces, all in pullgate (which holds %d, the rest awaiting containerd's GC)", seen, len(nsResp.Namespaces), total)
}
