"""Pure file readers: xplane, HLO, PT_XLA_DEBUG text, xprof tool data -> plain records or rows.

Used both by the live collectors and by `tpuscope import`; nothing here touches a runtime.
"""
