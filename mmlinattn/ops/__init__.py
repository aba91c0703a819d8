"""The papers' mathematics as plain tensor functions (no parameters, no registry)."""
