"""Renderers: a report in, text or bytes out (text, SVG/HTML, Chrome trace for Perfetto)."""
