"""vtaforge.runtime"""
