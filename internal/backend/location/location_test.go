package location

import (
	"context"
	"strings"
	"testing"
)

// TestErrorsShowNoCredential: an address that cannot be opened is named
// in the error with its credentials masked, whatever broke it, and also
// where url.Parse would quote a piece of the password.
func TestErrorsShowNoCredential(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		addr     string
		writable bool
		want     string
	}{
		{"https://alice:s3cr/et-pw@host/repo/", false, "https://alice:REDACTED@host/repo/: not a valid URL"},
		{"https://alice:s3cr%zzet-pw@host/repo/", false, "a % must start an escape"},
		{"https://alice:s3cr-et-pw@host/repo/?token=s3cr-et-pw", true, "https://alice:REDACTED@host/repo/?token=REDACTED: HTTP(S) can only be a source"},
		{"ftp://alice:s3cr-et-pw@host/repo/", false, "ftp://alice:REDACTED@host/repo/: unsupported address scheme"},
		{"http://alice:s3cr-et-pw@192.0.2.1/repo/", false, "--http-allow-insecure-auth"},
	} {
		var err error
		if tc.writable {
			_, _, err = OpenWritable(ctx, tc.addr, Options{})
		} else {
			_, _, err = Open(ctx, tc.addr, Options{})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cr") || strings.Contains(err.Error(), "et-pw") {
			t.Errorf("%s: err = %v, want one with %q and no credential", tc.addr, err, tc.want)
		}
	}
}
