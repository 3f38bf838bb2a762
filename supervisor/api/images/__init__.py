"""The images API: /v1/images/generations, /v1/images/edits, served image files."""
