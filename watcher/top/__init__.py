"""``inspect-watch top``: a live fleet view in the terminal (Textual), over the watch run as
a library (:func:`watcher.app.start`). :mod:`.model` holds what is shown as values,
:mod:`.app` the screens, :mod:`.run` starts both."""
