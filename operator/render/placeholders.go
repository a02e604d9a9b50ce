package render

import (
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/config"
)

// placeholderEnv maps each placeholder to the env var holding its value.
var placeholderEnv = map[string]string{
	PlaceholderPodIP:  "POD_IP",
	PlaceholderNodeIP: "NODE_IP",
}

// ExpandPlaceholders replaces, in the address fields of c (each listener's
// address and publicAddress, the relay's address and publicAddress), a
// value that is exactly PlaceholderPodIP or PlaceholderNodeIP with the
// value getenv returns for POD_IP or NODE_IP. It returns an error naming
// the field when that variable is empty. Other fields and other values are
// left alone.
func ExpandPlaceholders(c *config.Config, getenv func(string) string) error {
	expand := func(field string, v *string) error {
		env, ok := placeholderEnv[*v]
		if !ok {
			return nil
		}
		val := getenv(env)
		if val == "" {
			return fmt.Errorf("%s: %s needs the environment variable %s", field, *v, env)
		}
		*v = val
		return nil
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if err := expand(fmt.Sprintf("listeners[%d].address", i), &l.Address); err != nil {
			return err
		}
		if err := expand(fmt.Sprintf("listeners[%d].publicAddress", i), &l.PublicAddress); err != nil {
			return err
		}
	}
	if err := expand("relay.address", &c.Relay.Address); err != nil {
		return err
	}
	return expand("relay.publicAddress", &c.Relay.PublicAddress)
}

// ParseConfig is config.Parse for a rendered config: it decodes data
// strictly, expands the address placeholders from getenv (os.Getenv in a
// pod), then applies defaults and validates. It returns the config or the
// first error.
func ParseConfig(data []byte, getenv func(string) string) (*config.Config, error) {
	var c config.Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if err := ExpandPlaceholders(&c, getenv); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
