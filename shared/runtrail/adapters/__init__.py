"""Adapters that point agent frameworks (LangChain/LangGraph, …) at the runtrail topic."""
