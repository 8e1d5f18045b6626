package redis

import (
	"github.com/dchest/siphash"

	"encoding/binary"
	"math/rand/v2"
	"sync"
)

// SecretSize is the size of a partition secret in bytes.
const SecretSize = 16

// Secret is the SipHash key of the keyed hash that chooses a key's partition (Partition), so that
// nobody can compute which clients share a partition and fill it (see doc.go, "Keys"). Every
// proxy uses the same one, kept in Redis (AppendSecretKey, AppendSecretCall).
type Secret [SecretSize]byte

// NewSecret returns a random secret, the candidate a proxy offers when Redis holds none, drawn
// as sharedstate.LoadSecret draws its own (see there for why not crypto/rand).
func NewSecret() Secret {
	var s Secret
	binary.LittleEndian.PutUint64(s[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(s[8:], rand.Uint64())
	return s
}

// Partition returns which of a rule's partitions (hash tags) holds the key of descriptor:
// SipHash-2-4 of the descriptor's bytes under secret, modulo partitions, or 0 when
// partitions <= 1. It is part of the key layout: a descriptor moved to another partition (a
// new secret, another number of partitions) starts from a fresh key.
func Partition(secret *Secret, descriptor []byte, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	k0 := binary.LittleEndian.Uint64(secret[:8])
	k1 := binary.LittleEndian.Uint64(secret[8:])
	return int(siphash.Hash(k0, k1, descriptor) % uint64(min(partitions, MaxPartitions)))
}

// secretSuffix ends the key of the partition secret. It follows the domain's hash tag
// directly, where every rule key has a rule name and ':' first, so no rule's key is the same.
const secretSuffix = "#partition-secret"

// AppendSecretKey appends the key under which Redis holds the partition secret of a key
// prefix and domain: <prefix>:{<domain>}:#partition-secret, the prefix written as it is
// (see AppendKey). It is in the domain's slot, or the prefix's when that holds a hash tag.
func AppendSecretKey(dst []byte, prefix, domain string) []byte {
	dst = append(appendDomainTag(dst, prefix, domain), '}', ':')
	return append(dst, secretSuffix...)
}

// secretSource is lua/secret.lua escaped for webdis, made on first use by escapedSecret.
var (
	secretOnce   sync.Once
	secretSource []byte
)

func escapedSecret() []byte {
	secretOnce.Do(func() { secretSource = escape(nil, luaSecretScript) })
	return secretSource
}

// AppendSecretCall appends the webdis request body of the call that reads the partition
// secret stored under key (AppendSecretKey), storing candidate there first when Redis holds
// none (or holds something that is not a secret):
//
//	EVAL/<escaped lua/secret.lua>/1/<key>/<candidate as 32 hex digits>
//
// The read and the write are one script, so of several proxies that race to create the
// secret exactly one stores its candidate and all read that one back. The script is short and
// always sent in full (no EVALSHA). A proxy that knows the secret offers it as the candidate:
// should Redis have lost it (a restart without persistence, an eviction), it is stored again.
func AppendSecretCall(dst, key []byte, candidate *Secret) []byte {
	dst = append(dst, "EVAL/"...)
	dst = append(dst, escapedSecret()...)
	dst = append(dst, "/1/"...)
	dst = Escape(dst, key)
	dst = append(dst, '/')
	for _, c := range candidate {
		dst = append(dst, hexLower[c>>4], hexLower[c&0x0F])
	}
	return dst
}

// ParseSecret decodes webdis' answer to an AppendSecretCall body: exactly
// {"EVAL":"<32 lower-case hex digits>"} with status 200. The errors are those of
// ParseReplies: *StatusError for another status, *Error for an error reply, ErrMalformed for
// anything else.
func ParseSecret(status int, body []byte) (Secret, error) {
	var s Secret
	if status != 200 {
		return s, statusError(status)
	}
	const head, tail = `{"EVAL":"`, `"}`
	if len(body) != len(head)+2*SecretSize+len(tail) || string(body[:len(head)]) != head ||
		string(body[len(body)-len(tail):]) != tail {
		return s, secretReplyError(body)
	}
	hexDigits := body[len(head) : len(head)+2*SecretSize]
	for i := range s {
		hi, ok1 := lowerHexDigit(hexDigits[2*i])
		lo, ok2 := lowerHexDigit(hexDigits[2*i+1])
		if !ok1 || !ok2 {
			return s, malformed("want 32 lower-case hex digits")
		}
		s[i] = hi<<4 | lo
	}
	return s, nil
}

// secretReplyError is the error of an answer to a secret call that is not a secret: Redis's
// error ({"EVAL":[false,"<message>"]}, or [false] as ParseReplies reads it), or ErrMalformed.
// It is out of ParseSecret's line: an answer is nearly always the secret.
func secretReplyError(body []byte) error {
	if p := (parser{b: body}); p.literal(`{"EVAL":[false`) {
		return p.errorReply()
	}
	return malformed("want {\"EVAL\":\"<32 hex digits>\"}")
}

func lowerHexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
