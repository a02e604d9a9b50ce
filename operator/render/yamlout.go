package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"unicode"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// jsonToYAML returns js, a JSON document, as the YAML of a ConfigMap: what sigs.k8s.io/yaml's
// JSONToYAML makes of it, at about half the cost and always the same bytes for the same js.
//
// JSONToYAML reads the JSON with go-yaml's parser (so that numbers keep an integer type) into
// maps and lets go-yaml's encoder sort their keys. That sort orders runs of digits by value,
// and the order it uses is not transitive once keys mix digits and letters where they differ
// ("node-7" < "node-18" < "node-1a" < "node-7"): Kubernetes node names with hash suffixes, as
// in a config's nodePublicAddresses, then come out in the order Go's map iteration happened to
// give, and a Gateway's ConfigMap changes from one render to the next. Here encoding/json reads
// the JSON (UseNumber), numbers take the type go-yaml would resolve them to, and each object's
// keys are put in go-yaml's order by a stable sort of the keys already in byte order: the same
// order as go-yaml's wherever that order is consistent, and a fixed one where it is not.
// go-yaml v2 (JSONToYAML's encoder) writes the result. FuzzJSONToYAML holds the two to the same
// output on key sets without such cycles.
func jsonToYAML(js []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("json to yaml: %w", err)
	}
	if d.More() {
		return nil, fmt.Errorf("json to yaml: data after the JSON value")
	}
	v, err := yamlTree(v)
	if err != nil {
		// A number past float64's range, which json.Marshal never writes: go-yaml keeps
		// its literal, so leave it to JSONToYAML.
		return yaml.JSONToYAML(js)
	}
	return yamlv2.Marshal(v)
}

// yamlTree returns v, as encoding/json decoded it with UseNumber, as go-yaml v2 would write
// it after parsing the same JSON: each json.Number the Go number go-yaml resolves its literal
// to (int when the integer fits, then int64, uint64, else float64), each object a
// yaml.MapSlice in yamlKeyLess order.
func yamlTree(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sort.SliceStable(keys, func(i, j int) bool { return yamlKeyLess(keys[i], keys[j]) })
		ms := make(yamlv2.MapSlice, len(keys))
		for i, k := range keys {
			e, err := yamlTree(t[k])
			if err != nil {
				return nil, err
			}
			ms[i] = yamlv2.MapItem{Key: k, Value: e}
		}
		return ms, nil
	case []any:
		for i, e := range t {
			n, err := yamlTree(e)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
	case json.Number:
		s := string(t)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			if int64(int(i)) == i {
				return int(i), nil
			}
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("json to yaml: number %s: %w", s, err)
		}
		return f, nil
	}
	return v, nil
}

// yamlKeyLess is go-yaml v2's order of two string mapping keys: at the first rune where they
// differ, two letters compare as runes, a letter sorts after anything else, and otherwise the
// digit runs that start there compare by value (a run inside a number with a non-zero digit
// before it compares as a number, not as leading zeros), then by length, then as runes; a
// prefix sorts first.
func yamlKeyLess(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al, bl := unicode.IsLetter(ar[i]), unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		ai := i
		for ; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		bi := i
		for ; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}
