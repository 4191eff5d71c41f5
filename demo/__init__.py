"""The demo: a tiny online-RL loop on real parts (vLLM or a torch sampler, a PyTorch trainer)."""
