# The NCCL process group on GPUs (label gpu): every collective at world size 1, and at 2
# with one forked process per rank where two GPUs are; creation timeouts, a dead peer,
# rejected arguments. Without a GPU the GPU cases skip and say why. Included from this
# folder's CMakeLists.txt; fp8_engine_collectives_nccl exists only where the CUDA toolkit and
# NCCL were found.
if(TARGET fp8_engine_collectives_nccl)
  fp8_add_test(fp8_nccl_process_group_test gpu
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_process_group_test.cc
    LIBS fp8_engine_collectives_nccl fp8_engine_collectives fp8_kernels CUDA::cudart_static absl::status absl::statusor absl::strings
         absl::str_format absl::time)
endif()

# NCCL is opened at run time; that it opens and resolves needs NCCL, not a GPU.
if(TARGET fp8_engine_collectives_nccl)
  fp8_add_test(fp8_nccl_library_test unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/nccl_library_test.cc
    LIBS fp8_engine_collectives_nccl absl::status)
  target_include_directories(fp8_nccl_library_test SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
endif()
