# The package's version: CMakeLists.txt's project(VERSION), the one source
# (tests/test_pip_venv.sh fails when they differ).
__version__ = "0.2.0"
