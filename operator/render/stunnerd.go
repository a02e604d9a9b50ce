package render

import (
	"path"
	"strings"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// stunnerdName is the binary and image name of STUNner's dataplane.
const stunnerdName = "stunnerd"

// isStunnerdImage reports whether img names a stunnerd image, in any
// registry and at any tag or digest: l7mp/stunnerd,
// docker.io/l7mp/stunnerd:1.1.0, ghcr.io/acme/stunnerd@sha256:....
func isStunnerdImage(img string) bool {
	if i := strings.Index(img, "@"); i >= 0 {
		img = img[:i]
	}
	last := img[strings.LastIndex(img, "/")+1:]
	if i := strings.Index(last, ":"); i >= 0 {
		last = last[:i]
	}
	return last == stunnerdName
}

// isStunnerdCommand reports whether cmd runs the stunnerd binary, by name
// or by path.
func isStunnerdCommand(cmd []string) bool {
	return len(cmd) > 0 && path.Base(cmd[0]) == stunnerdName
}

// substituteStunnerd returns the Dataplane to render for dp. Every STUNner
// install has a `default` Dataplane naming the stunnerd image and command;
// running it as written would start stunnerd (which cannot read Tern's
// config) or crash, so the image becomes ternd's at this operator's
// version and the command ternd. Args are kept: ternd accepts stunnerd's
// flags. A Dataplane without an image means STUNner's default, stunnerd,
// and gets ternd's image too. The returned message says what was replaced, "" when nothing was
// (dp itself is then returned, unchanged).
func substituteStunnerd(dp *stnrv1.Dataplane) (*stnrv1.Dataplane, string) {
	// No image means STUNner's default, the stunnerd image.
	img, cmd := dp.Spec.Image == "" || isStunnerdImage(dp.Spec.Image), isStunnerdCommand(dp.Spec.Command)
	if !img && !cmd {
		return dp, ""
	}
	out := dp.DeepCopy()
	var what []string
	if img {
		out.Spec.Image = DefaultImage()
		// The user's pull policy was chosen for their stunnerd tag; ternd's
		// tag follows the operator, so the default for that tag applies.
		out.Spec.ImagePullPolicy = nil
		if dp.Spec.Image == "" {
			what = append(what, "no image (STUNner's default, stunnerd) with "+out.Spec.Image)
		} else {
			what = append(what, "image "+dp.Spec.Image+" with "+out.Spec.Image)
		}
	}
	if cmd {
		out.Spec.Command = append([]string{"ternd"}, dp.Spec.Command[1:]...)
		what = append(what, "command "+dp.Spec.Command[0]+" with ternd")
	}
	msg := "stunnerd replaced by ternd: " + strings.Join(what, ", ")
	if args, dropped := withoutConfigFlag(dp.Spec.Args); len(dropped) > 0 {
		// A stunnerd config location (a file under /etc/stunnerd, or
		// STUNner's CDS server) cannot hold the config Tern renders; ternd
		// must read the ConfigMap mounted at ConfigPath instead.
		out.Spec.Args = args
		return out, msg + "; args passed to ternd unchanged but " + strings.Join(dropped, " ") + ", replaced by -c " + ConfigPath
	}
	return out, msg + "; args passed to ternd unchanged"
}

// withoutConfigFlag returns args without their -c/--config flag and its
// value, and what was removed.
func withoutConfigFlag(args []string) (kept, dropped []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "c" && name != "config") {
			kept = append(kept, a)
			continue
		}
		dropped = append(dropped, a)
		if !hasValue && i+1 < len(args) {
			i++
			dropped = append(dropped, args[i])
		}
	}
	return kept, dropped
}

// dataplaneRef names a Dataplane; Dataplanes are cluster-scoped.
func dataplaneRef(dp *stnrv1.Dataplane) ObjectRef {
	return ObjectRef{Group: stnrv1.GroupName, Kind: "Dataplane", Name: dp.Name}
}
