"""AgentOPSD: recursive belief credit assignment for agentic GRPO."""
