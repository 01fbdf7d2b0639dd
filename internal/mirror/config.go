package mirror

import (
	"github.com/fdl-mirror/fdl-mirror/internal/catalog"
	"github.com/fdl-mirror/fdl-mirror/internal/config"
	"github.com/fdl-mirror/fdl-mirror/internal/repo"
)

// A configured mirror becomes its jobs here and nowhere else: the daemon,
// sync --config, status --config and prune --config all take their jobs
// from SyncJob and PruneJobOf, and both take how the stores are reached
// from StoresOf. The mirror's scheduling (Schedule, Prune), its receivers
// (Notify) and its place in the file (Line) are the daemon's and the
// notifier's, not a job's; config_test.go fails for a config field that
// is neither carried nor named as one of those.

// StoresOf is how a configured mirror's stores are reached and locked,
// and its catalogs bounded: the same for its syncs and its prunes.
func StoresOf(m config.Mirror) Stores {
	return Stores{
		Source:                m.Source,
		Sink:                  m.Sink,
		HTTPHeaders:           m.HTTPHeaders,
		HTTPAllowRedirects:    m.HTTPAllowRedirects,
		HTTPAllowInsecureAuth: m.HTTPAllowInsecureAuth,
		CAFile:                m.CAFile,
		LockWait:              m.LockWait,
		LockTTL:               m.LockTTL,
		Retries:               m.Retries,
		CatalogLimits: catalog.Limits{
			MaxFiles: m.CatalogMaxFiles, Timeout: m.CatalogTimeout,
			MemoryLimit: m.CatalogMemoryLimit, MaxSize: m.CatalogMaxSize,
			RequireSandbox: m.RequireSandbox,
		},
	}
}

// SyncJob is the sync of a configured mirror. It is never a dry run: only
// the command line asks for one.
func SyncJob(m config.Mirror) Job {
	return Job{
		Name:               m.Name,
		Stores:             StoresOf(m),
		Sinks:              m.Sinks,
		TrustedSigners:     m.TrustedSigners,
		RequireSignatures:  m.RequireSignatures,
		SignatureNamespace: m.SignatureNamespace,
		Concurrency:        m.Concurrency,
		BWLimit:            m.BWLimit,
		Refs:               repo.RefSelection{Include: m.Refs, Exclude: m.ExcludeRefs},
		AllowRewind:        m.AllowRewind,
		MaxUpstreamAge:     m.MaxUpstreamAge,
		Repair:             m.Repair,
		Force:              m.Force,
	}
}

// PruneJobOf is the prune of a configured mirror: its stores reached as
// its syncs reach them, its catalogs read under the same limits. A mirror
// of several sinks is pruned sink by sink: the caller sets Sink to each
// of m.AllSinks() in turn.
func PruneJobOf(m config.Mirror) PruneJob {
	return PruneJob{
		Name:      m.Name,
		Stores:    StoresOf(m),
		MaxDelete: m.PruneMaxDelete,
		Grace:     m.PruneGrace,
	}
}
