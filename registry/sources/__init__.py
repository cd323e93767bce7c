"""Where artifacts come from, and the device they are for: entries and sources
(:mod:`.entries`), override folders, installed data packages, tables and packs, a source's
standing (:mod:`.ownership`) and the device a call asks for (:mod:`.device`)."""
