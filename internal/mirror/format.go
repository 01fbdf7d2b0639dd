package mirror

import "fmt"

// HumanBytes writes a byte count for people, in powers of 1024: 512 B,
// 1.5 KiB, 3.2 GiB. The command's summaries and the daemon's page use it.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
