package generate

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// uuidClock makes UUIDv7 values (RFC 9562) that sort in the order they were
// made, even within one millisecond: a 12-bit counter in rand_a ("method 1"
// of the RFC) orders IDs of the same millisecond. Version IDs rely on this:
// the oldest version has the smallest ID.
var uuidClock struct {
	sync.Mutex
	lastMS int64
	seq    uint16
}

// newUUIDv7 returns a lowercase UUIDv7 string.
func newUUIDv7() string {
	uuidClock.Lock()
	ms := time.Now().UnixMilli()
	if ms <= uuidClock.lastMS {
		ms = uuidClock.lastMS
		uuidClock.seq++
		if uuidClock.seq > 0xfff {
			ms++
			uuidClock.seq = 0
		}
	} else {
		uuidClock.seq = 0
	}
	uuidClock.lastMS = ms
	seq := uuidClock.seq
	uuidClock.Unlock()

	var b [16]byte
	var msBytes [8]byte
	binary.BigEndian.PutUint64(msBytes[:], uint64(ms))
	copy(b[0:6], msBytes[2:8])
	b[6] = 0x70 | byte(seq>>8)
	b[7] = byte(seq)
	_, _ = rand.Read(b[8:])
	b[8] = 0x80 | b[8]&0x3f
	return formatUUID(b)
}

// newUUIDv4 returns a random lowercase UUID.
func newUUIDv4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = 0x40 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
