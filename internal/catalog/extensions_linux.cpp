//go:build linux && cgo

// A reader's DuckDB starts with one of the extensions linked into the
// library: core_functions, whose functions the reader's statements call
// (arg_min, strlen, sum; list_value, for the list of its lock-down's
// SET allowed_paths=[...]; without it that SET fails). See
// extensions_linux.go for why.
//
// DuckDB::DuckDB calls ExtensionHelper::LoadAllExtensions, which loads
// every extension linked in (autocomplete, core_functions, icu, json,
// parquet). The linker's --wrap (the cgo directive beside this file)
// sends that call here. These are C++ symbols of DuckDB's, named as the
// compiler mangles them; were one renamed by a later DuckDB, the link
// would fail on the __real_ or LoadExtension reference below, not the
// reader.

#include <string>

namespace duckdb {
class DuckDB;
// As DuckDB declares it (extension_helper.hpp).
enum class ExtensionLoadResult : unsigned char { LOADED_EXTENSION = 0, EXTENSION_UNKNOWN = 1, NOT_LOADED = 2 };
class ExtensionHelper {
public:
	static ExtensionLoadResult LoadExtension(DuckDB &db, const std::string &extension);
};
} // namespace duckdb

extern "C" {

// Set by the reader (readerOnlyCoreFunctions) before it opens a DuckDB.
int fdl_reader_extensions_only_core = 0;

void __real__ZN6duckdb15ExtensionHelper17LoadAllExtensionsERNS_6DuckDBE(duckdb::DuckDB &db);

void __wrap__ZN6duckdb15ExtensionHelper17LoadAllExtensionsERNS_6DuckDBE(duckdb::DuckDB &db) {
	if (fdl_reader_extensions_only_core &&
	    duckdb::ExtensionHelper::LoadExtension(db, "core_functions") == duckdb::ExtensionLoadResult::LOADED_EXTENSION) {
		return;
	}
	__real__ZN6duckdb15ExtensionHelper17LoadAllExtensionsERNS_6DuckDBE(db);
}

} // extern "C"
