# The strata command line's help, version and argument errors (tests/scripts/cli_args.sh).
add_test(NAME cli_args COMMAND bash ${CMAKE_SOURCE_DIR}/tests/scripts/cli_args.sh $<TARGET_FILE:strata>)
set_tests_properties(cli_args PROPERTIES LABELS cli TIMEOUT 120)
