package envoycheck

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/confchange"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// loadPlugins reads the filter configurations of a bootstrap or of a plugin configuration
// file. A file that does not load, or a configuration the filter refuses, is an error: check
// reports those on its own.
func loadPlugins(path string) ([]confchange.Plugin, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if IsPluginConfig(data, path) {
		cfg, err := config.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: the filter refuses the configuration: %s", path, firstLine(err))
		}
		return []confchange.Plugin{{Config: cfg}}, nil
	}
	c, err := envoyconf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []confchange.Plugin
	for _, l := range c.Listeners {
		if l.Filter == nil {
			continue
		}
		cfg, err := config.Parse(l.Filter.PluginConfig)
		if err != nil {
			return nil, fmt.Errorf("%s: listener %q: the filter refuses the configuration: %s", path, l.Name, firstLine(err))
		}
		out = append(out, confchange.Plugin{
			Where: "listener " + strconv.Quote(l.Name) + ", plugin " + strconv.Quote(l.Filter.PluginName),
			Key:   l.Name, VMID: l.Filter.VMID, Config: cfg,
			ClientAddress: &confchange.ClientAddress{UseRemoteAddress: l.UseRemoteAddress,
				XFFTrustedHops: l.XFFTrustedHops, SkipXFFAppend: l.SkipXFFAppend},
		})
	}
	return out, nil
}

// firstLine is the first line of an error (the parser reports one problem per line).
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// Changes reports, for every rule of the configurations in newPath, what changing from those
// in oldPath does to its state (both a bootstrap or a plugin configuration file; listeners are
// paired by name, or directly when each file has one filter configuration). Every reset is
// also a warning in the report, and so is a listener with no counterpart; a file that cannot be
// compared is an error.
func Changes(oldPath, newPath string) ([]confchange.RuleChange, *Report) {
	r := &Report{}
	olds, err := loadPlugins(oldPath)
	if err != nil {
		r.errorf("-previous: %v", err)
		return nil, r
	}
	news, err := loadPlugins(newPath)
	if err != nil {
		r.errorf("%v", err)
		return nil, r
	}
	changes, warnings := confchange.Compare(olds, news, oldPath)
	r.Warnings = append(r.Warnings, warnings...)
	return changes, r
}
