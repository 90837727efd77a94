# Writes a C++ source that holds files as byte arrays, for the chat page of
# `accord serve` (runtime/serve/web_assets.hpp): no tool but CMake, and
# nothing read from the disk or the network at run time.
#   cmake -DDIR=FOLDER -DNAMES=a.html,b.js -DOUTPUT=FILE.cpp -P embed_files.cmake
# Each file is served at /NAME with the Content-Type its extension gives and
# an ETag made of its SHA-256.
cmake_minimum_required(VERSION 3.22)

function(content_type_of name result)
  get_filename_component(extension "${name}" LAST_EXT)
  if(extension STREQUAL ".html")
    set(${result} "text/html; charset=utf-8" PARENT_SCOPE)
  elseif(extension STREQUAL ".css")
    set(${result} "text/css; charset=utf-8" PARENT_SCOPE)
  elseif(extension STREQUAL ".js")
    set(${result} "text/javascript; charset=utf-8" PARENT_SCOPE)
  elseif(extension STREQUAL ".svg")
    set(${result} "image/svg+xml" PARENT_SCOPE)
  else()
    message(FATAL_ERROR "embed_files.cmake: no Content-Type for '${name}'")
  endif()
endfunction()

string(REPLACE "," ";" names "${NAMES}")
set(arrays "")
set(table "")
set(index 0)
foreach(name IN LISTS names)
  file(READ "${DIR}/${name}" hex HEX)
  file(SHA256 "${DIR}/${name}" sha)
  string(SUBSTRING "${sha}" 0 16 etag)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){24})" "\\1\n    " bytes "${bytes}")
  content_type_of("${name}" type)
  string(APPEND arrays "// ${name}\nconst unsigned char k_file_${index}[] = {\n    ${bytes}};\n\n")
  string(APPEND table "      {\"/${name}\", \"${type}\", \"\\\"${etag}\\\"\", text_of(k_file_${index}, sizeof(k_file_${index}))},\n")
  math(EXPR index "${index} + 1")
endforeach()

set(source "// Written by cmake/embed_files.cmake from ${DIR}: edit those files, not this one.
#include <string_view>

#include \"runtime/serve/web_assets.hpp\"

namespace accord::serve {

namespace {

${arrays}std::string_view text_of(const unsigned char* bytes, std::size_t size) {
  return {reinterpret_cast<const char*>(bytes), size};
}

}  // namespace

std::span<const WebAsset> web_assets() {
  static const WebAsset assets[] = {
${table}  };
  return assets;
}

}  // namespace accord::serve
")
# Rewritten only when it changes, so that a build with unchanged files
# compiles nothing again.
file(WRITE "${OUTPUT}.new" "${source}")
file(COPY_FILE "${OUTPUT}.new" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.new")
