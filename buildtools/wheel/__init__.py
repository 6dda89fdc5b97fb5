"""One wheel: its metadata and build record, its ELF files, selective repair, static checks."""
