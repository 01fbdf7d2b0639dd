package repo

import "github.com/fdl-mirror/fdl-mirror/internal/backend"

// FindMainCatalog finds a version's main catalog where its folder's files
// are not known (a store that cannot list), as readers find it: it calls
// try with ducklake.duckdb, then, only where that is not there (try's
// error is backend.IsNotExist), with metadata.db, as fdl-cli 0.27 and
// later name it. It returns the file found and try's answer for it;
// where neither is there, ducklake.duckdb and try's answer for it. A
// version with both is read from ducklake.duckdb, and its metadata.db is
// not asked for. MainCatalog chooses the same from a listing.
func FindMainCatalog[T any](try func(file string) (T, error)) (string, T, error) {
	v, err := try(CatalogFile)
	if !backend.IsNotExist(err) {
		return CatalogFile, v, err
	}
	mv, merr := try(MetadataFile)
	if backend.IsNotExist(merr) {
		return CatalogFile, v, err
	}
	return MetadataFile, mv, merr
}
