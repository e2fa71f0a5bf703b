"""What scores a trajectory: the five failure families (``scoring``, with the score records that
``scored`` describes), the alignment of calls with expected steps, the outcome after a tool error and
the values an answer grounds, the figures per user turn (``turns``), a failed trajectory's first
divergence (``divergence``), who failed a conversation (``blame``) and the typed detail a score
keeps (``detail``, where it exists). ``families`` is the one catalogue of the families, the failures
and the causes: adding a failure kind starts there.
"""
