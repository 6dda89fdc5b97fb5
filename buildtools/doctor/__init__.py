"""`buildtools doctor`: why an installed extension fails beside this torch."""
