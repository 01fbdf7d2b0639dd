package main

import (
	"github.com/fdl-mirror/fdl-mirror/internal/fstest/testserver"
)

// gateway is a Versity S3 Gateway on a posix folder, started for the run
// by the test servers' launcher, with an access log: the server's own
// count of the requests each tool sends, retries and list pages included.
type gateway struct {
	*testserver.S3Server
}

func startGateway(binary, dir string) (*gateway, error) {
	s, err := testserver.StartS3(binary, dir)
	if err != nil {
		return nil, err
	}
	return &gateway{s}, nil
}

func (g *gateway) stop() {
	if g == nil {
		return
	}
	g.Process.Stop()
}

// env is what fdl-mirror (the SDK's standard chain) and rclone (a remote
// named "gw" configured by environment variables) need to reach the
// gateway.
func (g *gateway) env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + g.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_EC2_METADATA_DISABLED=true",
		"RCLONE_CONFIG_GW_TYPE=s3",
		"RCLONE_CONFIG_GW_PROVIDER=Other",
		"RCLONE_CONFIG_GW_ENDPOINT=" + g.Endpoint,
		"RCLONE_CONFIG_GW_REGION=" + g.Region,
		"RCLONE_CONFIG_GW_ACCESS_KEY_ID=" + g.AccessKey,
		"RCLONE_CONFIG_GW_SECRET_ACCESS_KEY=" + g.SecretKey,
		"RCLONE_CONFIG_GW_FORCE_PATH_STYLE=true",
	}
}

// url is the fdl-mirror address of a bucket's root.
func (g *gateway) url(bucket string) string { return g.URL(bucket, "") }
