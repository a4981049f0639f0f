"""One-off studies that decided a design; README.md lists each and what it decided."""
