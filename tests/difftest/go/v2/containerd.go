// containerd 2.x's half of docread (see ../docread.go): its import paths.
package main

import (
	"context"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The constant CRI's checkIfCheckpointOCIImage looks up (internal/cri/server/
// container_checkpoint_linux.go imports checkpointctl's lib as crmetadata), from the
// checkpointctl version containerd's go.mod requires.
const checkpointAnnotationName = crmetadata.CheckpointAnnotationName

var errInvalidArgument = errdefs.ErrInvalidArgument

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
