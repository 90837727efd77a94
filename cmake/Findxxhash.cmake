# xxHash (Debian's libxxhash-dev) ships no CMake config: this finds it and
# makes the imported target xxhash::xxhash (see FindCAF.cmake for why).
find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY xxhash)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxhash REQUIRED_VARS XXHASH_INCLUDE_DIR XXHASH_LIBRARY)
if(xxhash_FOUND AND NOT TARGET xxhash::xxhash)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES IMPORTED_LOCATION "${XXHASH_LIBRARY}"
                                                  INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
endif()
