"""The command line: every verb's arguments and dispatch. Nothing in buildtools imports it."""
