#!/bin/sh
# Stands in for a test tool that is not installed (tests/meson.build): each test
# that needs it fails, naming it, instead of leaving the suite. Called as the
# tool would be: missing-tool.sh TEST-FILE [ARGS...]; the file says which tool.
case "$1" in
  *.py) tool=/usr/bin/python3 ;;
  *.mjs | *.js) tool=node ;;
  *) tool="the program that runs it" ;;
esac
echo "the test $(basename "$1") needs $tool, which is not installed: run LP_SETUP_TESTS=1 bash scripts/setup.sh" >&2
exit 1
