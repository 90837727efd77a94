# `cmake --install BUILD [--prefix DIR]`: the libraries, the headers under
# include/accord, the `accord` command, and accordConfig.cmake, so that a
# service writes find_package(accord) and links accord::actors (a
# distributed session and everything below it), accord::serve or
# accord::runtime. examples/embed_in_service builds so, out of tree
# (tests/install/check.sh).
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

set(accord_libraries accord_settings accord_messages accord_kernels accord_base accord_agreement accord_model
    accord_text accord_net accord_rank accord_engine accord_session accord_generate accord_runtime accord_actors accord_serve)
# A runtime built with CUDA links its kernels (and the static CUDA runtime).
if(ACCORD_HAVE_CUDA)
  list(APPEND accord_libraries accord_cuda_kernels)
endif()
foreach(library IN LISTS accord_libraries)
  string(REPLACE "accord_" "" short_name ${library})
  set_target_properties(${library} PROPERTIES EXPORT_NAME ${short_name})
endforeach()
install(TARGETS ${accord_libraries} EXPORT accordTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS accord RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public face and what it includes (cmake/install_headers.cmake).
install(CODE "
  set(ACCORD_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(ACCORD_CXX \"${CMAKE_CXX_COMPILER}\")
  set(ACCORD_HEADER_DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/accord\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_headers.cmake\")")
install(EXPORT accordTargets NAMESPACE accord:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/accord)
configure_package_config_file(cmake/accordConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/accordConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/accord)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/accordConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/accordConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/accordConfigVersion.cmake
              cmake/FindCAF.cmake cmake/Findxxhash.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/accord)
