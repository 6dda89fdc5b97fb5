"""Names in buildtools/ that ci/dead-code.py (vulture) must count as used: each is called or
read by something that is not Python in this repository, for the reason on its line.

Not imported by anything; vulture only reads the names. An entry for code that is merely
unused does not belong here: delete that code instead. The last block is the ratchet of
issue 42: code only tests call, to be deleted with its tests (then its line goes).
"""

# ruff: noqa: F821

# the CLI's registry: cli/main.py names each command's `add_*_parser` as a string and
# imports it on first use (a start that loads one command module, not nine)
_ = (add_build_parser, add_check_parser, add_ci_parser, add_dist_parser, add_doctor_parser)
_ = (add_index_parser, add_init_parser, add_knowledge_parser, add_smoke_parser)

# protocol methods the standard library calls: ast.NodeVisitor, html.parser.HTMLParser
_ = (visit_JoinedStr, handle_starttag)
# the signal handler's (signum, frame) signature (cli/main.py)
_ = (frame,)
# attributes set for a library that reads them: ruamel.yaml's emitter, zipfile.ZipInfo
# (the Unix host byte of a wheel's entries), rich's progress table
_ = (default_flow_style, create_system, caption)
# the exit-status table (errors.ExitCode): argparse itself exits 2 on a usage error
_ = (USAGE,)
# columns of data/torch.yaml and data/cuda.yaml: their rows are validated at load with
# extra="forbid", so the model names every column, including facts no decision reads yet
_ = (py_limited_api, pip_complete)

# issue 42, to delete (only tests call them): each with the tests that serve it alone
_ = (options_dict, logging_to, never_bundle_reason, unconfirmed, job_for, deferred)
_ = (rocm_arch_flags, CHECK_CODES, parse_fatbin, parse_offload_bundles, cuda_sizes)
_ = (demangled, hip_archs, weaker_than)
