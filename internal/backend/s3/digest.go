package s3

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"hash/crc32"
	"strings"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fdl-mirror/fdl-mirror/internal/backend"
)

// objectDigest is the store's own checksum of a whole object, from the
// first answer to a GET, for a read that needs a resumption (a Range GET,
// whose answer carries no checksum of the object): a full-object CRC32C
// or CRC32 where the object has one (the cheapest to compute), else the
// ETag of a single-part object stored without KMS or customer keys, which
// is the MD5 of its bytes. Nil when the answer gives neither: a composite
// checksum of a multipart upload, a multipart ETag ("…-3"), an encrypted
// object's ETag.
func objectDigest(out *awss3.GetObjectOutput) *backend.ObjectDigest {
	if out.ChecksumType == "" || out.ChecksumType == types.ChecksumTypeFullObject {
		if want := decodeChecksum(out.ChecksumCRC32C); want != nil {
			return &backend.ObjectDigest{Name: "CRC32C", Hash: crc32.New(crc32.MakeTable(crc32.Castagnoli)), Want: want}
		}
		if want := decodeChecksum(out.ChecksumCRC32); want != nil {
			return &backend.ObjectDigest{Name: "CRC32", Hash: crc32.NewIEEE(), Want: want}
		}
	}
	if out.SSECustomerAlgorithm != nil || strings.HasPrefix(string(out.ServerSideEncryption), "aws:kms") {
		return nil
	}
	if out.ETag == nil {
		return nil
	}
	if md5Hex := etagMD5(*out.ETag); md5Hex != "" {
		want, err := hex.DecodeString(md5Hex)
		if err == nil {
			return &backend.ObjectDigest{Name: "MD5 (ETag)", Hash: md5.New(), Want: want}
		}
	}
	return nil
}

// decodeChecksum is a base64 checksum header's bytes; nil when absent,
// malformed, or a composite one ("…-3").
func decodeChecksum(v *string) []byte {
	if v == nil || *v == "" || strings.Contains(*v, "-") {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if err != nil || len(b) != 4 {
		return nil
	}
	return b
}
