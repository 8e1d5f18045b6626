package redis

import "strconv"

// safe marks the bytes Escape passes through unchanged: ASCII letters, digits, '_' and '-'.
// A positive list needs no knowledge of the bytes webdis gives a meaning (see doc.go) to stay
// safe, also against webdis versions that add meanings.
var safe = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'], t['-'] = true, true
	return t
}()

const hexUpper = "0123456789ABCDEF"

// Escape appends arg to dst as one webdis argument: bytes in [A-Za-z0-9_-] as they are, every
// other byte as %XX (upper-case hex), which webdis decodes back, so any byte string reaches
// Redis as exactly one argument with exactly those bytes. It does not allocate when dst has
// room for 3*len(arg) more bytes.
func Escape(dst, arg []byte) []byte { return escape(dst, arg) }

// escape is Escape for either form of argument: request-derived keys arrive as bytes, the
// scripts' sources are strings.
func escape[T string | []byte](dst []byte, arg T) []byte {
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if safe[c] {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', hexUpper[c>>4], hexUpper[c&0x0F])
		}
	}
	return dst
}

// AppendKey appends the Redis key of one rate-limit counter to dst:
//
//	<prefix>:{<domain>}:<rule>:<descriptor>
//
// The domain is part of every key, so two deployments with different domains and the same rule
// names never share counts, and it is the hash tag (unless the prefix holds one, below), so
// that one call can touch all of a request's global rules (AppendPartKey spreads a rule over
// slots).
//
// The descriptor is written verbatim, whatever its bytes (Redis keys are binary-safe, and
// Escape makes any byte string one webdis argument), with one '#' in front when it starts with
// '#'. That keeps the mapping injective and apart from a rule's own keys (its key set and
// overflow key, see Rule.Partitioned), whose suffix is one '#' and a byte other than '#'. The
// key's length is the descriptor's plus len(prefix)+len(domain)+len(rule)+6, bounded by the
// configuration's max_key_bytes, and a client can reach no other key than its own
// descriptor's.
//
// prefix, domain and rule come from the configuration. The prefix is written as it is, so
// every key starts with exactly the configured prefix and ':' (what a Redis ACL ~<prefix>:*
// admits). A prefix with braces is a hash tag of its own: Redis and twemproxy hash the part
// between the key's first '{' and the first '}' after it, so "{app}" puts every key of every
// domain on one slot. The prefix must not hold an empty tag ("{}" at its first '{', which
// makes Redis hash the whole key, descriptor included); the configuration refuses one. In the
// domain and the rule, so that the domain's tag is closed where the layout says and the parts
// cannot run into each other, the bytes '{', '}', '%', ':' and bytes outside 0x21-0x7E are
// written as %XX; well-formed names contain none of these and are written as they are.
//
// Either way the head holds a '{' and then a '}' before the descriptor, so the hash tag ends
// in the head: braces in a descriptor never choose a key's slot.
//
// The key is raw bytes, which a redis.Item (or Rule.AppendEvalSHA) escapes for webdis.
func AppendKey(dst []byte, prefix, domain, rule string, descriptor []byte) []byte {
	return AppendPartKey(dst, prefix, domain, rule, 1, 0, descriptor)
}

// MaxPartitions is the largest number of hash tags a rule's keys may be spread over (see
// AppendPartKey); it matches the largest redis.partitions the configuration accepts.
const MaxPartitions = 1024

// AppendPartKey appends the Redis key of one rate-limit counter of a rule whose keys are
// spread over partitions hash tags, in partition part (Partition of the descriptor under the
// proxies' secret). With partitions <= 1 the key is AppendKey's, the hash tag the domain, and
// every key of the domain is on one slot (part is ignored). With partitions > 1:
//
//	<prefix>:{<domain>:<rule>:<p>}:<descriptor>         p = part
//
// so one rule's keys are spread over partitions slots (and so over the shards of a sharded
// store; a prefix with a hash tag of its own keeps them all on its slot), while the key set
// and overflow key of each partition (see Rule.Partitioned) share the slot of the keys they
// bound, and one script call on one key stays on one slot. The braces enclose ':' after the
// domain, which an escaped domain never contains, so no partitioned key equals a key of the
// unpartitioned layout.
func AppendPartKey(dst []byte, prefix, domain, rule string, partitions, part int, descriptor []byte) []byte {
	return appendDescriptor(appendHead(dst, prefix, domain, rule, partitions, part), descriptor)
}

// appendDescriptor appends the descriptor of a key after its head, with one '#' in front when
// it starts with '#' (see AppendKey).
func appendDescriptor(dst, descriptor []byte) []byte {
	if len(descriptor) > 0 && descriptor[0] == '#' {
		dst = append(dst, '#')
	}
	return append(dst, descriptor...)
}

// appendHead appends everything of a key before its descriptor:
// <prefix>:{<domain>}:<rule>: unpartitioned, <prefix>:{<domain>:<rule>:<part>}: otherwise.
func appendHead(dst []byte, prefix, domain, rule string, partitions, part int) []byte {
	dst = appendDomainTag(dst, prefix, domain)
	if partitions <= 1 {
		dst = append(dst, '}', ':')
		dst = appendName(dst, rule)
		return append(dst, ':')
	}
	dst = append(dst, ':')
	dst = appendName(dst, rule)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(part), 10)
	return append(dst, '}', ':')
}

// appendDomainTag appends the start every key of a prefix and domain shares, the partition
// secret's included: <prefix>:{<domain>, the prefix written as it is and the domain escaped;
// the caller closes the tag.
func appendDomainTag(dst []byte, prefix, domain string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, ':', '{')
	return appendName(dst, domain)
}

const hexLower = "0123456789abcdef"

// appendName writes a configured domain or rule name, percent-encoding the bytes that would
// break the hash tag or the injectivity of the key layout (':' is the separator after a
// domain or a rule).
func appendName(dst []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '{' || c == '}' || c == '%' || c == ':' || c < 0x21 || c > 0x7E {
			dst = append(dst, '%', hexUpper[c>>4], hexUpper[c&0x0F])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}
