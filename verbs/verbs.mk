# verbs/: the raw verbs transport (not built yet).
