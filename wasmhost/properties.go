package wasmhost

import (
	"encoding/binary"
	"net"
	"strconv"
	"strings"
)

// property resolves a proxy_get_property path (segments joined by NUL) the
// way Envoy does for the attributes a filter uses. Strings are returned raw,
// integers as 8-byte little-endian. Stream attributes exist only in stream
// contexts; request.* attributes come from the request headers and, as in
// Envoy (which drops its pointer to them once the filter continues), only
// while those headers are reachable.
func (v *vm) property(path string) ([]byte, Status) {
	parts := strings.Split(path, "\x00")
	h := v.h
	if len(parts) == 1 {
		switch parts[0] {
		case "plugin_name":
			return []byte(h.opts.PluginName), StatusOK
		case "plugin_root_id":
			return []byte(h.opts.RootID), StatusOK
		case "plugin_vm_id":
			return []byte(h.opts.VMID), StatusOK
		}
	}
	s := v.activeStream()
	if s == nil {
		return nil, StatusNotFound
	}
	if len(parts) == 2 {
		r := s.req
		switch parts[0] {
		case "xds":
			switch parts[1] {
			case "route_name":
				return []byte(r.RouteName), StatusOK
			case "virtual_host_name":
				return []byte(r.VirtualHost), StatusOK
			case "cluster_name":
				return []byte(r.ClusterName), StatusOK
			case "route_metadata":
				return r.RouteMetadata, StatusOK
			}
		case "source":
			addr := orDefault(r.SourceAddress, "127.0.0.1:50000")
			switch parts[1] {
			case "address":
				return []byte(addr), StatusOK
			case "port":
				if _, p, err := net.SplitHostPort(addr); err == nil {
					if n, err := strconv.Atoi(p); err == nil {
						return int64Bytes(int64(n)), StatusOK
					}
				}
			}
		case "request":
			if parts[1] == "protocol" {
				return []byte("HTTP/1.1"), StatusOK
			}
			if !s.avail[MapRequestHeaders] && !s.logPhase {
				return nil, StatusNotFound
			}
			hm := s.maps[MapRequestHeaders]
			header := requestAttributeHeaders[parts[1]]
			if parts[1] == "url_path" {
				p, _ := hm.get(":path")
				if i := strings.IndexByte(p, '?'); i >= 0 {
					p = p[:i]
				}
				return []byte(p), StatusOK
			}
			if header != "" {
				if val, ok := hm.get(header); ok {
					return []byte(val), StatusOK
				}
			}
		case "response":
			if parts[1] == "code" && s.phase > phWaitUpstream && s.maps[MapResponseHeaders] != nil {
				st, _ := s.maps[MapResponseHeaders].get(":status")
				if n, err := strconv.Atoi(st); err == nil {
					return int64Bytes(int64(n)), StatusOK
				}
			}
		}
	}
	// Values set with proxy_set_property live in the stream's filter state.
	if val, ok := s.properties[path]; ok {
		return val, StatusOK
	}
	return nil, StatusNotFound
}

// requestAttributeHeaders maps the request.* attributes that are a request header to that
// header.
var requestAttributeHeaders = map[string]string{
	"path": ":path", "host": ":authority", "scheme": ":scheme", "method": ":method",
	"id": "x-request-id", "useragent": "user-agent", "referer": "referer",
}

func int64Bytes(n int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(n))
	return b
}
