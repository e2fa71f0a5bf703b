"""What reports and gates: the aggregate ``Report`` of scored trajectories (``evaluate`` scores and
aggregates in one call), the gate that compares a run with a baseline and its Markdown
(``gate``, ``gate_report``), the cooperation gap under the simulated-user profiles (``profiles``,
``cooperation``), the statistics that tell noise from a change (``stats``) and how a figure reads for
people (``wording``).
"""
