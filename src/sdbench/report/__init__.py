"""Reports: text tables (:mod:`.text`, :mod:`.tables`), plots (:mod:`.plots`), HTML (:mod:`.html`)."""
