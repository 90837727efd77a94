# Installs the public face, include/accord/*.hpp, and exactly the headers it
# includes, however deep (the compiler's own dependency list): the public
# headers under include/accord, the rest under include/accord by their path
# in the source tree. Run by `cmake --install` (cmake/install.cmake), with
# ACCORD_SOURCE_DIR, ACCORD_CXX and ACCORD_HEADER_DESTINATION set.
file(GLOB public_headers "${ACCORD_SOURCE_DIR}/include/accord/*.hpp")
set(needed)
foreach(header IN LISTS public_headers)
  execute_process(
    COMMAND "${ACCORD_CXX}" -std=c++20 -MM -I "${ACCORD_SOURCE_DIR}" -I "${ACCORD_SOURCE_DIR}/include" -x c++ "${header}"
    OUTPUT_VARIABLE rule RESULT_VARIABLE failed ERROR_VARIABLE why)
  if(failed)
    message(FATAL_ERROR "accord: cannot list what ${header} includes: ${why}")
  endif()
  string(REGEX REPLACE "\\\\\n" " " rule "${rule}")
  string(REGEX REPLACE "^[^:]*:" "" rule "${rule}")
  separate_arguments(files UNIX_COMMAND "${rule}")
  list(APPEND needed ${files})
endforeach()
list(REMOVE_DUPLICATES needed)
foreach(file IN LISTS needed)
  file(RELATIVE_PATH relative "${ACCORD_SOURCE_DIR}" "${file}")
  if(relative MATCHES "^include/accord/")
    set(destination "${ACCORD_HEADER_DESTINATION}")
  else()
    get_filename_component(folder "${relative}" DIRECTORY)
    set(destination "${ACCORD_HEADER_DESTINATION}/${folder}")
  endif()
  file(INSTALL DESTINATION "${destination}" TYPE FILE FILES "${file}")
endforeach()
