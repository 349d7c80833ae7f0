"""The rule language at load time: validating documents and compiling them into rules.

``ctx`` collects located errors, ``schema`` validates rule documents (and publishes the
JSON Schema), ``paths`` compiles JMESPath into getters, ``regex`` checks and compiles
rule regexes for RE2, ``templates`` parses messages, ``predicates`` compiles predicate
mappings into a node tree and lowers it to the closures the engine calls. Nothing here
runs per event except what it builds.
"""
