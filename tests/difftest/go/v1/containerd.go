// containerd 1.7's half of docread (see ../docread.go): its import paths.
package main

import (
	"context"

	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/content/local"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/images"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// containerd 1.7's CRI has no checkIfCheckpointOCIImage (checkpoint restore from an image
// came in 2.0), and 1.7 does not depend on checkpointctl: the value is checkpointctl's
// lib.CheckpointAnnotationName (v1.3.0 to v1.6.0), unused unless the build sets
// criChecksCheckpoint.
const checkpointAnnotationName = "org.criu.checkpoint.container.name"

var errInvalidArgument = errdefs.ErrInvalidArgument

// 1.7's images package imports github.com/containerd/platforms directly (its own
// github.com/containerd/containerd/platforms only forwards to it), so ../docread.go's
// platforms.Only is the very matcher 1.7 uses.

type provider struct{ dir string }

func (p provider) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	return openBlob(p.dir, desc, func(path string) (sizedReaderAt, error) { return local.OpenReader(path) })
}

type ctrReader struct{ p provider }

func newReader(dir string) reader { return ctrReader{provider{dir}} }

func (r ctrReader) Manifest(ctx context.Context, root ocispec.Descriptor, pm platforms.MatchComparer) (ocispec.Manifest, error) {
	return images.Manifest(ctx, r.p, root, pm)
}

func (r ctrReader) ReachedManifests(ctx context.Context, root ocispec.Descriptor, pm platforms.MatchComparer) ([]ocispec.Descriptor, error) {
	var reached []ocispec.Descriptor
	children := images.ChildrenHandler(r.p)
	h := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if images.IsManifestType(desc.MediaType) {
			reached = append(reached, desc)
			return nil, nil
		}
		return children(ctx, desc)
	})
	err := images.Walk(ctx, images.LimitManifests(images.FilterPlatforms(h, pm), pm, 1), root)
	return reached, err
}

func (r ctrReader) RootFS(ctx context.Context, config ocispec.Descriptor) ([]digest.Digest, error) {
	return images.RootFS(ctx, r.p, config)
}

func (r ctrReader) ReadBlob(ctx context.Context, desc ocispec.Descriptor) ([]byte, error) {
	return content.ReadBlob(ctx, r.p, desc)
}
