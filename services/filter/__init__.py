"""Quiver filter service (python -m quiver_filter): SQL92 selectors, compiled, served through filter servers.

Engine: sql92.py (+ sql92_lexer/parser/compiler/values). Server: app.py
(broker attachment, registration), handlers.py (PULL_MESSAGE for tp=SQL92,
CHECK_CLIENT_CONFIG), filtered_pull.py (pull raw batches, keep matches, long
polling), scanning.py (properties of stored records, no sockets),
selectors.py (compiled selectors per group/topic/expression). See README.md.
"""
