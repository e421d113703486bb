"""vtaforge.runtime.rtl"""
