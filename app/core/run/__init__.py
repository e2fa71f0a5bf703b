"""What runs an agent through a suite's cases: the agent protocol and the case loop
(``runner``), the mock router that answers the agent's tool calls and injects the planned faults
(``router``), and the simulated user's protocol in a conversation (``conversation``). It produces
trajectory records; it does not score them.
"""
