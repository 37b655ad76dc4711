// Command nodeid-image builds the nodeid-init container image without a
// container engine: one OCI image index with an image per platform, each
// from scratch, written as an OCI layout directory and as one tar that
// podman load and docker load accept. Build tooling for make image, not
// shipped. See docs/image.md.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image contains; the test and docs/image.md rely on these.
const (
	binaryPath = "usr/local/bin/nodeid-init"
	leaseDir   = "var/lib/nodeid"
	uid        = 65532
	userName   = "nonroot"
	license    = "Apache-2.0"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nodeid-image:", err)
		os.Exit(1)
	}
}

// binFlag collects -bin OS/ARCH=PATH, one per platform.
type binFlag []platformBinary

type platformBinary struct {
	platform v1.Platform
	path     string
}

func (b *binFlag) String() string { return fmt.Sprint(*b) }

func (b *binFlag) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	goos, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || path == "" || goos == "" || arch == "" {
		return fmt.Errorf("want OS/ARCH=PATH, got %q", v)
	}
	*b = append(*b, platformBinary{v1.Platform{OS: goos, Architecture: arch}, path})
	return nil
}

type options struct {
	bins      binFlag
	layoutDir string
	tarPath   string
	name      string
	version   string
	revision  string
	source    string
	created   time.Time
}

func run(args []string, stdout io.Writer) error {
	var o options
	flags := flag.NewFlagSet("nodeid-image", flag.ContinueOnError)
	flags.Var(&o.bins, "bin", "OS/ARCH=PATH of a static nodeid-init (repeat per platform)")
	flags.StringVar(&o.layoutDir, "layout", "dist/oci", "OCI layout directory to write (replaced)")
	flags.StringVar(&o.tarPath, "tar", "dist/nodeid-init-image.tar", "tar to write: the OCI layout plus a docker manifest.json")
	flags.StringVar(&o.name, "name", "nodeid-init", "image name given to the loaded image")
	flags.StringVar(&o.version, "version", os.Getenv("VERSION"), "image version: label, tag (default $VERSION)")
	flags.StringVar(&o.revision, "revision", os.Getenv("COMMIT"), "source revision label (default $COMMIT)")
	flags.StringVar(&o.source, "source", "https://github.com/nodeid/nodeid", "source label")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() != 0 || len(o.bins) == 0 || o.version == "" {
		return errors.New("usage: nodeid-image -version V -bin OS/ARCH=PATH [-bin ...] [-layout DIR] [-tar FILE]")
	}
	// Every timestamp is SOURCE_DATE_EPOCH (else 0): same inputs, same digests.
	var epoch int64
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var err error
		if epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH: %v", err)
		}
	}
	o.created = time.Unix(epoch, 0).UTC()

	idx, err := buildIndex(o)
	if err != nil {
		return err
	}
	if err := writeLayout(o, idx); err != nil {
		return err
	}
	if err := writeTar(o, idx); err != nil {
		return err
	}
	d, _ := idx.Digest()
	fmt.Fprintf(stdout, "%s %s:%s\nlayout %s\ntar %s\n", d, o.name, tag(o.version), o.layoutDir, o.tarPath)
	return nil
}

// tag makes a version usable as an image tag (git describe may give '+').
func tag(version string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
	if len(t) > 120 {
		t = t[:120]
	}
	return t
}

func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   "nodeid-init",
		"org.opencontainers.image.version": o.version,
		"org.opencontainers.image.source":  o.source,
		"org.opencontainers.image.created": o.created.Format(time.RFC3339),
		// SPDX expression of LICENSE at the repository root
		"org.opencontainers.image.licenses": license,
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

func buildIndex(o options) (v1.ImageIndex, error) {
	base, err := baseLayer(o.created)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range o.bins {
		img, err := buildImage(o, b, base)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", b.platform.OS, b.platform.Architecture, err)
		}
		p := b.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, labels(o)).(v1.ImageIndex), nil
}

func buildImage(o options, b platformBinary, base v1.Layer) (v1.Image, error) {
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	binLayer, err := layer(o.created, []file{{name: binaryPath, mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	at := v1.Time{Time: o.created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: at, CreatedBy: "nodeid-image: /etc/passwd, /etc/group, /" + leaseDir + ", /tmp"}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: at, CreatedBy: "nodeid-image: /" + binaryPath}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = b.platform.OS, b.platform.Architecture, b.platform.Variant
	cf.Created = at
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{"/" + binaryPath},
		Cmd:        []string{"--help"},
		WorkingDir: "/" + leaseDir,
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels:     labels(o),
		// A volume starts as a copy of the image's directory, owned by
		// the non-root user: the lease file is writable on a read-only root.
		Volumes: map[string]struct{}{"/" + leaseDir: {}},
	}
	return mutate.ConfigFile(img, cf)
}

// file is one tar entry; a name ending in / is a directory.
type file struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
}

// baseLayer is the same for every platform, so the blob is shared.
func baseLayer(created time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	return layer(created, []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/" + userName + "/", mode: 0o700, uid: uid, gid: uid},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "var/", mode: 0o755},
		{name: "var/lib/", mode: 0o755},
		{name: leaseDir + "/", mode: 0o755, uid: uid, gid: uid},
	})
}

func layer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: created}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
}

// writeLayout writes a layout whose index.json names one entry, the
// multi-platform index: crane push DIR REF pushes it whole, and skopeo or
// podman address it as oci:DIR:TAG.
func writeLayout(o options, idx v1.ImageIndex) error {
	if err := os.RemoveAll(o.layoutDir); err != nil {
		return err
	}
	p, err := layout.Write(o.layoutDir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag(o.version),
		// containerd (and docker on it) names the loaded image from this
		"io.containerd.image.name": o.name + ":" + tag(o.version),
	}))
}

// dockerManifest is one entry of docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// writeTar writes the layout as a tar plus manifest.json, the shape docker
// save has had since Docker 25: OCI readers use index.json, docker-archive
// readers (classic docker load, podman load) manifest.json, where every
// platform's image gets its own tag NAME:TAG-ARCH.
func writeTar(o options, idx v1.ImageIndex) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var dms []dockerManifest
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		m, err := img.Manifest()
		if err != nil {
			return err
		}
		dm := dockerManifest{
			Config:   blobPath(m.Config.Digest),
			RepoTags: []string{fmt.Sprintf("%s:%s-%s", o.name, tag(o.version), d.Platform.Architecture)},
		}
		for _, l := range m.Layers {
			dm.Layers = append(dm.Layers, blobPath(l.Digest))
		}
		dms = append(dms, dm)
	}
	manifest, err := json.Marshal(dms)
	if err != nil {
		return err
	}

	var names []string
	err = filepath.WalkDir(o.layoutDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(names)

	if err := os.MkdirAll(filepath.Dir(o.tarPath), 0o755); err != nil {
		return err
	}
	f, err := os.Create(o.tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, size int64, r io.Reader) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: o.created, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	for _, n := range names {
		rel, _ := filepath.Rel(o.layoutDir, n)
		src, err := os.Open(n)
		if err != nil {
			return err
		}
		st, err := src.Stat()
		if err == nil {
			err = add(filepath.ToSlash(rel), st.Size(), src)
		}
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := add("manifest.json", int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
