// docread: containerd's side of pullgate's image-document differential test.
//
// It reads container image documents (OCI/Docker index, manifest, config) with containerd's
// own Go functions, compiled against containerd's own module at one version, and prints what
// containerd decides, one JSON line per case. pullgate's Rust reader prints the same lines for
// the same corpus; the test compares the two.
//
//	docread [-platform linux/amd64] CORPUS_DIR
//	docread -version
//
// CORPUS_DIR holds one directory per case (processed in sorted name order), each with
//
//	root.json               the image record's target descriptor (mediaType may be "")
//	blobs/<alg>/<encoded>   the blobs (root document, nested manifests, configs; no layers)
//
// which is the layout of containerd's content/local store under a root. Output, per case:
//
//	{"case":"NAME","ok":true,"manifest":"sha256:…","config":"sha256:…","layers":[…],
//	 "diff_ids":[…],"checkpoint":false,"checkpoint_checked":true,"root_annotations":{…}}
//	{"case":"NAME","ok":false,"stage":"manifest","error":"…","checkpoint":false,…}
//
//	manifest          the digest of the manifest images.Manifest(ctx, provider, root,
//	                  platforms.Only(platform)) returns (see chosenManifestDigest)
//	config, layers    that manifest's Config.Digest and Layers[i].Digest
//	diff_ids          images.RootFS(ctx, provider, manifest.Config)
//	checkpoint        what this containerd's CRI CreateContainer decides in
//	                  checkIfCheckpointOCIImage: the root blob (content.ReadBlob of the image
//	                  record's target) json.Unmarshal-ed into ocispec.Index, and
//	                  index.Annotations[checkpointctl lib.CheckpointAnnotationName] present.
//	                  Only the 2.x lines whose CRI has that check make it (checkpoint_checked:
//	                  true; it is set at build time from containerd's source); 1.7's CRI has
//	                  no such check and 2.4's CreateContainer no longer calls it: there,
//	                  checkpoint is always false and no checkpoint_error is reported.
//	checkpoint_error  that read or Unmarshal failed (CreateContainer would fail); it does not
//	                  change ok, which is about the manifest, config and rootfs.
//	root_annotations  informational: the root decoded as ocispec.Index, its Annotations (null
//	                  when absent or when the root does not decode as an index).
//	stage             informational, failures only: root (root.json unreadable: a corpus
//	                  problem), manifest (images.Manifest), rootfs (images.RootFS; the
//	                  line keeps the manifest, config and layers found before it).
//
// Errors are per case: a failing (or panicking: "panic: …") case is reported and the next
// one is read. The version-specific half (containerd's import paths) is in v1/ (1.7) and v2/
// (2.x); scripts/setup.sh (build_docreaders) builds each in a throwaway wrapper module.
package main

import (
	"bytes"
	"context"
	// go-digest knows an algorithm only once its crypto package is linked in; containerd's
	// binaries link both (TLS), so sha256, sha384 and sha512 digests validate there.
	_ "crypto/sha256"
	_ "crypto/sha512"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"sort"

	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Set at build time (-ldflags -X): the containerd version this binary is compiled against,
// and "true" when that version's CRI CreateContainer calls checkIfCheckpointOCIImage.
var (
	containerdVersion   = "unknown"
	criChecksCheckpoint = "false"
)

// reader is containerd's reading of one case directory; v1/ and v2/ implement it with that
// version's images and content packages.
type reader interface {
	// images.Manifest(ctx, provider, root, pm)
	Manifest(ctx context.Context, root ocispec.Descriptor, pm platforms.MatchComparer) (ocispec.Manifest, error)
	// The manifest descriptors containerd's own Walk / Children / FilterPlatforms /
	// LimitManifests(…, 1) handlers reach from root (see chosenManifestDigest).
	ReachedManifests(ctx context.Context, root ocispec.Descriptor, pm platforms.MatchComparer) ([]ocispec.Descriptor, error)
	// images.RootFS(ctx, provider, config)
	RootFS(ctx context.Context, config ocispec.Descriptor) ([]digest.Digest, error)
	// content.ReadBlob(ctx, provider, desc)
	ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error)
}

type line struct {
	Case              string            `json:"case"`
	OK                bool              `json:"ok"`
	Stage             string            `json:"stage,omitempty"`
	Error             string            `json:"error,omitempty"`
	Manifest          string            `json:"manifest,omitempty"`
	Config            *string           `json:"config,omitempty"`
	Layers            *[]string         `json:"layers,omitempty"`
	DiffIDs           *[]string         `json:"diff_ids,omitempty"`
	Checkpoint        bool              `json:"checkpoint"`
	CheckpointError   string            `json:"checkpoint_error,omitempty"`
	CheckpointChecked bool              `json:"checkpoint_checked"`
	RootAnnotations   map[string]string `json:"root_annotations"`
}

func main() {
	platform := flag.String("platform", "linux/amd64", "platform to choose the manifest for (platforms.Only)")
	version := flag.Bool("version", false, "print the containerd version and the modules built in, and exit")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-platform OS/ARCH[/VARIANT]] CORPUS_DIR\n       %s -version\n", os.Args[0], os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version {
		printVersion()
		return
	}
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	p, err := platforms.Parse(*platform)
	if err != nil {
		fmt.Fprintf(os.Stderr, "docread: -platform: %v\n", err)
		os.Exit(2)
	}
	pm := platforms.Only(p)

	corpus := flag.Arg(0)
	entries, err := os.ReadDir(corpus) // sorted by name
	if err != nil {
		fmt.Fprintf(os.Stderr, "docread: %v\n", err)
		os.Exit(1)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)

	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for _, name := range names {
		out := readCase(filepath.Join(corpus, name), pm)
		out.Case = name
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(os.Stderr, "docread: %v\n", err)
			os.Exit(1)
		}
	}
}

func printVersion() {
	fmt.Printf("docread: containerd %s (CRI checkpoint check: %s)\n", containerdVersion, criChecksCheckpoint)
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Printf("go %s\n", bi.GoVersion)
		for _, m := range bi.Deps {
			v := m.Version
			if m.Replace != nil {
				v += " => " + m.Replace.Path + " " + m.Replace.Version
			}
			fmt.Printf("%s %s\n", m.Path, v)
		}
	}
}

// guard runs f, turning a panic into an error.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

func readCase(dir string, pm platforms.MatchComparer) (out line) {
	ctx := context.Background()
	out.CheckpointChecked = criChecksCheckpoint == "true"
	fail := func(stage string, err error) line {
		out.OK, out.Stage, out.Error = false, stage, err.Error()
		return out
	}

	var root ocispec.Descriptor
	if err := guard(func() error {
		b, err := os.ReadFile(filepath.Join(dir, "root.json"))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &root)
	}); err != nil {
		return fail("root", fmt.Errorf("root.json: %w", err))
	}
	r := newReader(dir)

	// CRI's checkIfCheckpointOCIImage (internal/cri/server/container_checkpoint_linux.go,
	// containerd 2.1): content.ReadBlob(ctx, contentStore, image.Target), json.Unmarshal into
	// v1.Index (error: CreateContainer fails), then
	// `if index.Annotations == nil` / `_, ok := index.Annotations[crmetadata.CheckpointAnnotationName]`.
	if err := guard(func() error {
		raw, err := r.ReadBlob(ctx, root)
		if err != nil {
			return fmt.Errorf("failed to read image blob from containerd: %w", err)
		}
		var index ocispec.Index
		if err := json.Unmarshal(raw, &index); err != nil {
			return fmt.Errorf("failed to unmarshall blob into OCI index: %w", err)
		}
		out.RootAnnotations = index.Annotations
		if out.CheckpointChecked && index.Annotations != nil {
			_, out.Checkpoint = index.Annotations[checkpointAnnotationName]
		}
		return nil
	}); err != nil && out.CheckpointChecked {
		out.CheckpointError = err.Error()
	}

	var m ocispec.Manifest
	var mdgst digest.Digest
	if err := guard(func() (err error) {
		if m, err = r.Manifest(ctx, root, pm); err != nil {
			return err
		}
		mdgst, err = chosenManifestDigest(ctx, r, root, pm, m)
		return err
	}); err != nil {
		return fail("manifest", err)
	}
	out.Manifest = mdgst.String()
	cfg := m.Config.Digest.String()
	out.Config = &cfg
	layers := []string{}
	for _, l := range m.Layers {
		layers = append(layers, l.Digest.String())
	}
	out.Layers = &layers

	var diffIDs []digest.Digest
	if err := guard(func() (err error) {
		diffIDs, err = r.RootFS(ctx, m.Config)
		return err
	}); err != nil {
		return fail("rootfs", err)
	}
	ids := []string{}
	for _, d := range diffIDs {
		ids = append(ids, d.String())
	}
	out.DiffIDs = &ids
	out.OK = true
	return out
}

// chosenManifestDigest returns the digest of the manifest images.Manifest returned as m.
//
// images.Manifest returns the decoded manifest, not its descriptor. Its walk (the same code in
// 1.7.24, 2.1.9 and 2.4.2, but for where it takes the platform of a platform-less entry's
// config from) is a chain: an index-typed descriptor's handler reads the index, keeps the
// entries with no platform or a platform pm matches, sorts them stably with pm.Less (entries
// without a platform last) and returns only the first; a manifest-typed descriptor's handler
// returns no children. So the walk visits at most one manifest-typed descriptor, the last link
// of the chain, and a successful images.Manifest returned that one's decoding.
//
// That chain is exactly the one containerd's own exported handlers walk:
// images.Walk(LimitManifests(FilterPlatforms(Children, pm), pm, 1)): Children reads an index
// with content.ReadBlob, checks it with the same validateMediaType and returns its Manifests;
// FilterPlatforms keeps `d.Platform == nil || pm.Match(*d.Platform)`; LimitManifests sorts an
// index-typed parent's children with the same stable sort and keeps the first. Here manifest-
// typed descriptors are recorded and not descended into. Where the two differ it is only in
// failures (images.Manifest fails on unknown media types, on a platform-less entry whose
// config's platform does not match, and when nothing is left), and this is only called after
// images.Manifest succeeded.
//
// This does not record the provider's ReaderAt calls instead: content.ReadBlob serves a
// descriptor that embeds its content (`data` whose length is the size and whose digest is the
// digest) without calling the provider at all, so reads do not trace the walk.
//
// As a check, the reached descriptor must be the only one, and its blob (content.ReadBlob,
// which serves embedded data the same way) must decode (json.Unmarshal into ocispec.Manifest,
// as images.Manifest does) to exactly m; otherwise the case fails with an error saying so.
func chosenManifestDigest(ctx context.Context, r reader, root ocispec.Descriptor, pm platforms.MatchComparer, m ocispec.Manifest) (digest.Digest, error) {
	reached, err := r.ReachedManifests(ctx, root, pm)
	if err != nil {
		return "", fmt.Errorf("docread: images.Manifest succeeded, but walking to its manifest failed: %w", err)
	}
	if len(reached) != 1 {
		ds := []string{}
		for _, d := range reached {
			ds = append(ds, d.Digest.String())
		}
		return "", fmt.Errorf("docread: ambiguous: images.Manifest succeeded, but the walk reached %d manifests %v", len(reached), ds)
	}
	p, err := r.ReadBlob(ctx, reached[0])
	if err != nil {
		return "", fmt.Errorf("docread: rereading manifest %s: %w", reached[0].Digest, err)
	}
	var again ocispec.Manifest
	if err := json.Unmarshal(p, &again); err != nil {
		return "", fmt.Errorf("docread: rereading manifest %s: %w", reached[0].Digest, err)
	}
	if !reflect.DeepEqual(again, m) {
		return "", fmt.Errorf("docread: ambiguous: manifest %s reached by the walk does not decode to the manifest images.Manifest returned", reached[0].Digest)
	}
	return reached[0].Digest, nil
}

// blobReaderAt is what the provider returns: content.ReaderAt (io.ReaderAt, io.Closer,
// Size) of either version, over a blob already read and verified.
type blobReaderAt struct{ *bytes.Reader }

func (blobReaderAt) Close() error { return nil }

// sizedReaderAt is content.ReaderAt of either version (what content/local.OpenReader returns).
type sizedReaderAt interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// openBlob is the case directory's read-only content provider's ReaderAt, containerd's
// content/local store's ReaderAt with one addition. As local.store.ReaderAt (same at 1.7.24,
// 2.1.9 and 2.4.2): the digest is validated (desc.Digest.Validate) and the blob is opened at
// <dir>/blobs/<algorithm>/<encoded> with local.OpenReader (a missing blob: ErrNotFound); the
// descriptor's size and media type are not looked at. local.NewStore itself is not used: it
// creates <dir>/ingest, and the corpus is read-only here.
//
// The addition: the blob's content must hash to its digest. containerd's content store only
// ever holds blobs it verified on commit, so a corpus blob that does not match its name is a
// state containerd never reads; it is reported as an error rather than read (it could also
// form a digest cycle, which 1.7 and 2.1's images.Walk would follow until the stack overflows).
func openBlob(dir string, desc ocispec.Descriptor, open func(string) (sizedReaderAt, error)) (sizedReaderAt, error) {
	if err := desc.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("calculating blob path for ReaderAt: cannot calculate blob path from invalid digest: %v: %w", err, errInvalidArgument)
	}
	p := filepath.Join(dir, "blobs", desc.Digest.Algorithm().String(), desc.Digest.Encoded())
	ra, err := open(p)
	if err != nil {
		return nil, fmt.Errorf("blob %s expected at %s: %w", desc.Digest, p, err)
	}
	defer ra.Close()
	b := make([]byte, ra.Size())
	if n, err := ra.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == ra.Size()) {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if got := desc.Digest.Algorithm().FromBytes(b); got != desc.Digest {
		return nil, fmt.Errorf("docread: blob %s holds content of digest %s (containerd's content store never holds such a blob)", desc.Digest, got)
	}
	return blobReaderAt{bytes.NewReader(b)}, nil
}
