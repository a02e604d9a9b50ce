package render

import (
	"fmt"
	"sort"
)

// Severity says whether a Problem stops something from being rendered.
type Severity string

const (
	// SeverityError: the object, or the part of it named by Field, was not
	// rendered.
	SeverityError Severity = "Error"
	// SeverityWarning: rendered, but perhaps not as the user meant.
	SeverityWarning Severity = "Warning"
)

// ObjectRef names a Kubernetes object; Namespace is empty for
// cluster-scoped ones.
type ObjectRef struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String returns Kind[.group] namespace/name.
func (r ObjectRef) String() string {
	k := r.Kind
	if r.Group != "" {
		k += "." + r.Group
	}
	if r.Namespace == "" {
		return k + " " + r.Name
	}
	return k + " " + r.Namespace + "/" + r.Name
}

// Problem is one thing wrong with the input, tied to the object and the
// field (a path such as "spec.listeners[1].tls.certificateRefs[0]") at fault.
type Problem struct {
	Object   ObjectRef `json:"object"`
	Field    string    `json:"field,omitempty"`
	Severity Severity  `json:"severity"`
	Message  string    `json:"message"`
}

// Error returns "<object>: <field>: <message>".
func (p Problem) Error() string {
	if p.Field == "" {
		return fmt.Sprintf("%s: %s", p.Object, p.Message)
	}
	return fmt.Sprintf("%s: %s: %s", p.Object, p.Field, p.Message)
}

// problems collects Problems while rendering.
type problems []Problem

func (ps *problems) add(sev Severity, obj ObjectRef, field, format string, args ...any) Problem {
	p := Problem{Object: obj, Field: field, Severity: sev, Message: fmt.Sprintf(format, args...)}
	*ps = append(*ps, p)
	return p
}

func (ps *problems) errorf(obj ObjectRef, field, format string, args ...any) Problem {
	return ps.add(SeverityError, obj, field, format, args...)
}

func (ps *problems) warnf(obj ObjectRef, field, format string, args ...any) Problem {
	return ps.add(SeverityWarning, obj, field, format, args...)
}

// sorted returns the problems ordered by object, field and message, without
// duplicates (a shared object, e.g. a GatewayConfig, is checked once per
// Gateway using it).
func (ps problems) sorted() []Problem {
	out := append([]Problem(nil), ps...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Object != b.Object {
			return a.Object.String() < b.Object.String()
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		return a.Message < b.Message
	})
	uniq := out[:0]
	for i, p := range out {
		if i > 0 && p == out[i-1] {
			continue
		}
		uniq = append(uniq, p)
	}
	if len(uniq) == 0 {
		return nil
	}
	return uniq
}
