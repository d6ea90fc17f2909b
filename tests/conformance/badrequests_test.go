package conformance

// TestBadRequests sends wrong requests straight to pullgate's socket (as containerd's proxy
// client does) and checks that each gets containerd's error class and that nothing changed:
// the same snapshots, the same directories, nothing written outside pullgate's root.

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/snapshots"
	"google.golang.org/grpc/metadata"
)

func TestBadRequests(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	defer func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
	}()
	sn := d.snapshotter()
	ctx := context.Background()

	// A valid chain: base (committed) <- child (committed) <- active.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := sn.Prepare(ctx, "base-a", "")
	must(err)
	must(sn.Commit(ctx, "base", "base-a"))
	_, err = sn.Prepare(ctx, "child-a", "base")
	must(err)
	must(sn.Commit(ctx, "child", "child-a"))
	_, err = sn.Prepare(ctx, "active", "child")
	must(err)
	abs := "/etc/pullgate-must-not-exist"
	mounts, err := sn.Prepare(ctx, abs, "")
	if err != nil {
		t.Fatalf("an absolute key is an opaque name and must be accepted: %v", err)
	}
	for _, m := range mounts {
		if !strings.HasPrefix(m.Source, d.root+"/") {
			t.Errorf("mount source %q is outside pullgate's root", m.Source)
		}
	}

	state := func() (keys []string, dirs []string) {
		must(sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
			keys = append(keys, i.Name+"|"+i.Parent+"|"+i.Kind.String())
			return nil
		}))
		entries, err := os.ReadDir(filepath.Join(d.root, "snapshots"))
		must(err)
		for _, e := range entries {
			dirs = append(dirs, e.Name())
		}
		sort.Strings(keys)
		return keys, dirs
	}
	keysBefore, dirsBefore := state()

	big := strings.Repeat("x", 4096)
	bigLabel := snapshots.WithLabels(map[string]string{"k": big})
	cases := []struct {
		name  string
		class func(error) bool
		err   error
	}{}
	add := func(name string, class func(error) bool, err error) {
		cases = append(cases, struct {
			name  string
			class func(error) bool
			err   error
		}{name, class, err})
	}
	_, err = sn.Prepare(ctx, "k1", "no-such-parent")
	add("prepare on unknown parent", errdefs.IsNotFound, err)
	_, err = sn.Prepare(ctx, "k1", "active")
	add("prepare on an active parent", errdefs.IsInvalidArgument, err)
	_, err = sn.Prepare(ctx, "active", "child")
	add("prepare of an existing key", errdefs.IsAlreadyExists, err)
	_, err = sn.View(ctx, "v1", "no-such-parent")
	add("view on unknown parent", errdefs.IsNotFound, err)
	add("commit of an unknown key", errdefs.IsNotFound, sn.Commit(ctx, "n1", "no-such-key"))
	add("commit of a committed key", errdefs.IsFailedPrecondition, sn.Commit(ctx, "n1", "child"))
	add("commit onto an existing name", errdefs.IsAlreadyExists, sn.Commit(ctx, "base", "active"))
	add("remove of a snapshot with children", errdefs.IsFailedPrecondition, sn.Remove(ctx, "base"))
	add("remove of an unknown key", errdefs.IsNotFound, sn.Remove(ctx, "no-such-key"))
	_, err = sn.Mounts(ctx, "child")
	add("mounts of a committed snapshot", errdefs.IsFailedPrecondition, err)
	_, err = sn.Mounts(ctx, "no-such-key")
	add("mounts of an unknown key", errdefs.IsNotFound, err)
	_, err = sn.Usage(ctx, "no-such-key")
	add("usage of an unknown key", errdefs.IsNotFound, err)
	_, err = sn.Stat(ctx, "no-such-key")
	add("stat of an unknown key", errdefs.IsNotFound, err)
	for _, k := range []string{"", "../../escape", "a/../../b", "..", "nul\x00key", "new\nline"} {
		_, err = sn.Prepare(ctx, k, "")
		add("prepare with key "+strings.ReplaceAll(k, "\x00", `\0`), errdefs.IsInvalidArgument, err)
	}
	_, err = sn.Prepare(ctx, "k2", "base\x00")
	add("prepare with a NUL in the parent", errdefs.IsInvalidArgument, err)
	add("commit to a name with '..'", errdefs.IsInvalidArgument, sn.Commit(ctx, "../../x", "active"))
	_, err = sn.Prepare(ctx, "k3", "", bigLabel)
	add("prepare with an oversized label", errdefs.IsInvalidArgument, err)
	add("commit with an oversized label", errdefs.IsInvalidArgument, sn.Commit(ctx, "n2", "active", bigLabel))
	_, err = sn.Update(ctx, snapshots.Info{Name: "child", Labels: map[string]string{"k": big}}, "labels.k")
	add("update with an oversized label", errdefs.IsInvalidArgument, err)
	_, err = sn.Update(ctx, snapshots.Info{Name: "child", Parent: "x"}, "parent")
	add("update of an immutable field", errdefs.IsInvalidArgument, err)
	_, err = sn.Update(ctx, snapshots.Info{Name: "no-such-key"})
	add("update of an unknown key", errdefs.IsNotFound, err)
	add("walk with a malformed filter", errdefs.IsInvalidArgument,
		sn.Walk(ctx, func(context.Context, snapshots.Info) error { return nil }, `labels."unterminated==x`))

	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: succeeded, want an error", c.name)
		} else if !c.class(c.err) {
			t.Errorf("%s: wrong error class: %v", c.name, c.err)
		}
	}
	keysAfter, dirsAfter := state()
	if strings.Join(keysBefore, "\n") != strings.Join(keysAfter, "\n") {
		t.Errorf("snapshots changed:\nbefore %v\nafter  %v", keysBefore, keysAfter)
	}
	if strings.Join(dirsBefore, ",") != strings.Join(dirsAfter, ",") {
		t.Errorf("directories changed: before %v after %v", dirsBefore, dirsAfter)
	}
	if _, err := os.Lstat(abs); err == nil {
		t.Errorf("%s exists: a key escaped pullgate's root", abs)
	}
	info, err := sn.Stat(ctx, "child")
	must(err)
	if len(info.Labels) != 0 {
		t.Errorf("a refused update changed labels: %v", info.Labels)
	}
	t.Logf("%d wrong requests refused with the right class; state unchanged", len(cases))

	// Namespace from the containerd-namespace header when the key has no <ns>/<seq>/ prefix;
	// the first value wins.
	client := snapshotsapi.NewSnapshotsClient(d.conn)
	hctx := metadata.AppendToOutgoingContext(ctx, "containerd-namespace", "hdr-first", "containerd-namespace", "hdr-second")
	if _, err := client.Prepare(hctx, &snapshotsapi.PrepareSnapshotRequest{Key: "from-header"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Prepare(hctx, &snapshotsapi.PrepareSnapshotRequest{Key: "keyns/7/from-key"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(d.log)
	if !strings.Contains(string(b), `namespace=hdr-first key="from-header"`) {
		t.Errorf("namespace was not taken from the first header value; log:\n%s", b)
	}
	if !strings.Contains(string(b), `namespace=keyns key="keyns/7/from-key"`) {
		t.Errorf("the key prefix did not take precedence over the header; log:\n%s", b)
	}
}
